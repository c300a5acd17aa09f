"""Swap a model's nn.Linear and nn.LayerNorm layers for TransformerEngine's, weights copied.

Linear layers follow accel's one eligibility rule (accel.backends.conversion.plan_conversion);
LayerNorms get their own decisions, reported beside them. Nothing stops at a skipped layer.
TE's modules own new Parameters, so the conversion remembers which old Parameter each new
one replaces: optimizers built before `prepare` are re-pointed with `ParameterMap.remap`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

import torch
from torch import nn

from accel.backends.conversion import (
    ALREADY,
    CONVERTED,
    EXCLUDED,
    ROOT,
    ConversionReport,
    LayerDecision,
    plan_conversion,
    replace_layers,
)
from accel.backends.fp8.small_layers import SmallLayerRule
from accel.backends.fp8.te_params import MasterWeights

NOT_AFFINE = "without affine weight or bias"
MULTI_DIM = "over several dimensions"
OWN_FORWARD = "a subclass with its own forward"
EXTRA = "with extra parameters"
_NORM_SKIP_ORDER = (EXCLUDED, NOT_AFFINE, MULTI_DIM, OWN_FORWARD, EXTRA, ALREADY, ROOT)


@dataclass
class ParameterMap:
    """Old Parameter -> the TE module's Parameter that replaced it (old ones held weakly)."""

    _entries: dict[int, tuple[weakref.ref[nn.Parameter], nn.Parameter]] = field(default_factory=dict)

    def add(self, old: nn.Parameter | None, new: nn.Parameter | None) -> None:
        if old is not None and new is not None:
            self._entries[id(old)] = (weakref.ref(old), new)

    def forget(self, old: nn.Parameter) -> None:
        """Keep `old` in optimizers (it is not replaced after all)."""
        self._entries.pop(id(old), None)

    def get(self, param: Any) -> Any:
        entry = self._entries.get(id(param))
        return entry[1] if entry is not None and entry[0]() is param else param

    def remap(self, optimizer: torch.optim.Optimizer) -> int:
        """Point `optimizer`'s groups (and any state) at the new Parameters; returns how many moved."""
        moved = 0
        for group in optimizer.param_groups:
            params = [self.get(p) for p in group["params"]]
            moved += sum(new is not old for new, old in zip(params, group["params"]))
            group["params"] = params
        for old in list(optimizer.state):
            new = self.get(old)
            if new is not old:
                optimizer.state[new] = optimizer.state.pop(old)
        return moved


MXFP8_ALIGNMENT = 32
"""TE's MXFP8 scales blocks of 32 values: GEMM dimensions must be multiples of 32 (get_align_size_for_quantization)."""
ALIGNMENTS: dict[str, tuple[int, str]] = {
    "mxfp8": (MXFP8_ALIGNMENT, "TransformerEngine's MXFP8 scales blocks of 32 values"),
    "nvfp4": (128, "TransformerEngine aligns NVFP4 GEMMs to 128 (get_align_size_for_quantization; 16-value blocks, "
                   "16x16 Hadamard transforms)"),
}
"""scaling -> (the multiple both dimensions of a converted Linear must be, why); 16 for the others (FP8 GEMMs)."""


TE_CONV1D_REASON = (
    "transformers' Conv1D (a Linear with its weight stored transposed, as in GPT-2) has no TransformerEngine "
    "module: te.Linear replaces nn.Linear only; backend='native' converts Conv1D"
)


def plan_linears(
    model: nn.Module, te: ModuleType, exclude_modules: tuple[str, ...], scaling: str = "delayed",
    small_layers: SmallLayerRule | None = None,
) -> ConversionReport:
    """accel's decision for every nn.Linear of `model` (a te.Linear counts as already converted).

    With MXFP8 block scaling both dimensions must be multiples of 32, with NVFP4 of 128, else of 16.
    """
    alignment, reason = ALIGNMENTS.get(scaling, (16, ""))
    return plan_conversion(
        model, exclude_modules=exclude_modules, is_converted=lambda m: isinstance(m, te.Linear),
        alignment=alignment, alignment_reason=reason,
        conv1d_refusal=TE_CONV1D_REASON, small_layers=small_layers,
    )


def convert_linears(
    model: nn.Module, te: ModuleType, report: ConversionReport, params: ParameterMap, masters: MasterWeights | None,
    device: torch.device,
) -> None:
    """Replace each nn.Linear `report` marks converted by a te.Linear with the same weights.

    With `masters` (fp8_params) the te.Linear is built under TE's quantized_model_init and holds its
    weight in FP8; the nn.Linear's weight Parameter becomes its master, which the optimizer keeps.
    TE's modules are built on the training `device` (TE runs on CUDA only), wherever the model is.
    """
    # Conv1D is refused for te, so the layers the report converts are nn.Linear.
    replace_layers(model, report, lambda linear: _te_linear(te, cast(nn.Linear, linear), params, masters, device))


def convert_layer_norms(
    model: nn.Module, te: ModuleType, exclude_modules: tuple[str, ...], params: ParameterMap, device: torch.device
) -> ConversionReport:
    """Replace each nn.LayerNorm TE can run by a te.LayerNorm with the same weights."""
    modules = dict(model.named_modules())
    decisions = tuple(
        _decide_norm(name, module, exclude_modules, isinstance(module, te.LayerNorm))
        for name, module in modules.items()
        if isinstance(module, (nn.LayerNorm, te.LayerNorm))
    )
    report = ConversionReport(decisions)
    replace_layers(model, report, lambda norm: _te_layer_norm(te, norm, params, device))
    return report


def layer_norm_summary(report: ConversionReport) -> str:
    """One line, e.g. "TransformerEngine: converted 3 of 4 LayerNorm layers (skipped: 1 excluded)"."""
    line = f"TransformerEngine: converted {len(report.converted)} of {len(report.layers)} LayerNorm layers"
    counts = [
        f"{n} {category}" for category in _NORM_SKIP_ORDER if (n := sum(d.category == category for d in report.skipped))
    ]
    return line + (f" (skipped: {', '.join(counts)})" if counts else "")


def _decide_norm(name: str, norm: Any, patterns: tuple[str, ...], converted: bool) -> LayerDecision:
    size = int(getattr(norm, "normalized_shape", (0,))[-1]) if not converted else 0

    def decision(category: str, reason: str = "") -> LayerDecision:
        return LayerDecision(name, size, size, category, reason)

    matched = [p for p in patterns if fnmatch.fnmatchcase(name, p)]
    if converted:
        return decision(ALREADY, "already a TransformerEngine LayerNorm")
    if name == "":
        return decision(ROOT, "the model itself is the LayerNorm and cannot replace itself; wrap it")
    if matched:
        return decision(EXCLUDED, f"excluded by pattern {matched[0]!r}")
    if norm.weight is None or norm.bias is None:
        return decision(
            NOT_AFFINE,
            "TransformerEngine's LayerNorm always learns a weight and a bias; kept as nn.LayerNorm "
            "(LayerNorm runs in high precision on every backend, so FP8 is not affected)",
        )
    if len(norm.normalized_shape) != 1:
        return decision(MULTI_DIM, f"normalizes over {tuple(norm.normalized_shape)}; TE's LayerNorm only the last dim")
    if type(norm).forward is not nn.LayerNorm.forward:
        return decision(OWN_FORWARD, f"{type(norm).__name__} has its own forward, which TE's LayerNorm would drop")
    extra = [n for n in norm._parameters if n not in ("weight", "bias")] + list(norm._buffers) + list(norm._modules)
    if extra:
        return decision(EXTRA, f"{type(norm).__name__} has {', '.join(extra)}, which TE's LayerNorm would drop")
    return decision(CONVERTED)


@torch.no_grad()
def _te_linear(
    te: ModuleType, linear: nn.Linear, params: ParameterMap, masters: MasterWeights | None, device: torch.device
) -> nn.Module:
    weight = cast(nn.Parameter, linear.weight)  # nn.Module keeps a registered weight a Parameter
    with masters.init_context() if masters is not None else contextlib.nullcontext():
        layer = te.Linear(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            params_dtype=weight.dtype,
            device=device,
        )
    _copy_parameters(linear, layer, params)
    if masters is not None:
        params.forget(weight)  # the optimizer keeps stepping the nn.Linear's weight: the master
        masters.add(layer, layer.weight, weight)
    return layer


@torch.no_grad()
def _te_layer_norm(te: ModuleType, norm: Any, params: ParameterMap, device: torch.device) -> nn.Module:
    weight = norm.weight
    layer = te.LayerNorm(norm.normalized_shape[0], eps=norm.eps, params_dtype=weight.dtype, device=device)
    _copy_parameters(norm, layer, params)
    return layer


def _copy_parameters(source: nn.Module, target: nn.Module, params: ParameterMap) -> None:
    """Copy weight and bias values, requires_grad and train/eval mode; remember old -> new."""
    for name in ("weight", "bias"):
        old, new = getattr(source, name), getattr(target, name, None)
        if old is None or new is None:
            continue
        new.copy_(old)
        new.requires_grad_(old.requires_grad)
        params.add(old, new)
    target.train(source.training)
