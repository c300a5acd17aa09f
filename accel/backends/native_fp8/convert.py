"""Swap a model's nn.Linear layers for FP8 layers, and report on every one of them.

Also the model-level helpers around the swap: undoing it, the state dict with
the original names, and the FP8 scaling state saved and restored beside it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from accel.backends.native_fp8.linear import Float8Linear
from accel.backends.native_fp8.scaling import ScalerGroup

FP8_ALIGNMENT: int = 16

# Skip categories, in the order summary() lists them.
CONVERTED = "converted"
ALREADY = "already converted"
EXCLUDED = "excluded"
NOT_ALIGNED = f"not a multiple of {FP8_ALIGNMENT}"
EXTRA_STATE = "with extra parameters"
ROOT = "root module"
NOT_CALLED = "inside MultiheadAttention"
_SKIP_ORDER: tuple[str, ...] = (NOT_ALIGNED, EXCLUDED, ALREADY, EXTRA_STATE, NOT_CALLED, ROOT)


@dataclass(frozen=True)
class LayerDecision:
    """What conversion did with one nn.Linear: ``category`` is CONVERTED or a skip category."""

    name: str
    in_features: int
    out_features: int
    category: str
    reason: str

    @property
    def converted(self) -> bool:
        return self.category == CONVERTED

    def line(self) -> str:
        verdict = "converted" if self.converted else "skipped"
        detail = f": {self.reason}" if self.reason else ""
        return f"{self.name} ({self.in_features} -> {self.out_features}): {verdict}{detail}"


@dataclass(frozen=True)
class ConversionReport:
    """Every nn.Linear of the model, converted or skipped, with the reason."""

    layers: tuple[LayerDecision, ...]
    unmatched_patterns: tuple[str, ...] = ()

    @property
    def converted(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if d.converted)

    @property
    def skipped(self) -> tuple[LayerDecision, ...]:
        return tuple(d for d in self.layers if not d.converted)

    @property
    def num_fp8(self) -> int:
        """Layers that now run in FP8: converted by this call or already converted."""
        return sum(d.category in (CONVERTED, ALREADY) for d in self.layers)

    def summary(self) -> str:
        """One line, e.g. "FP8: converted 12 of 14 Linear layers (skipped: 1 not a multiple of 16, 1 excluded)"."""
        line = f"FP8: converted {len(self.converted)} of {len(self.layers)} Linear layers"
        if not self.layers:
            line += " (the model has no nn.Linear)"
        counts = [
            f"{n} {category}"
            for category in _SKIP_ORDER
            if (n := sum(d.category == category for d in self.layers))
        ]
        if counts:
            line += f" (skipped: {', '.join(counts)})"
        if self.unmatched_patterns:
            names = ", ".join(repr(p) for p in self.unmatched_patterns)
            line += f"; exclude patterns that matched no module: {names}"
        return line

    def details(self) -> str:
        """The summary, then one line per Linear layer."""
        return "\n".join([self.summary(), *(f"  {d.line()}" for d in self.layers)])

    def __str__(self) -> str:
        return self.details()


def convert_linears(
    model: nn.Module,
    *,
    exclude_modules: tuple[str, ...] = (),
    make_layer: Callable[[nn.Linear], nn.Module],
) -> ConversionReport:
    """Replace, in place, each eligible nn.Linear of ``model`` by ``make_layer(linear)``.

    Eligible: an nn.Linear (subclasses too) whose in_features and out_features are
    multiples of 16, whose qualified name matches no ``exclude_modules`` pattern
    (fnmatch), that is not already a Float8Linear, is not ``model`` itself, is not
    the out_proj of an nn.MultiheadAttention (which never calls it), and has no
    parameters, buffers or submodules beyond weight and bias. A module
    registered under several names is replaced under all of them. Never stops at
    a skipped layer; returns the report of every Linear.
    """
    _check_convert_args(model, exclude_modules, make_layer)
    decisions: list[LayerDecision] = []
    replacements: dict[int, nn.Module] = {}
    matched: set[str] = set()
    modules = dict(model.named_modules())
    for name, module in modules.items():
        if not isinstance(module, nn.Linear):
            continue
        patterns = [p for p in exclude_modules if fnmatch.fnmatchcase(name, p)]
        matched.update(patterns)
        parent = modules[name.rpartition(".")[0]] if name else None
        decision = _decide(name, module, patterns, parent)
        if decision.converted:
            replacements[id(module)] = make_layer(module)
        decisions.append(decision)
    _replace_children(model, replacements)
    unmatched = tuple(p for p in exclude_modules if p not in matched)
    return ConversionReport(tuple(decisions), unmatched)


def _check_convert_args(
    model: object, exclude_modules: object, make_layer: object
) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model={type(model).__name__} is not supported; accepted: an nn.Module")
    if not isinstance(exclude_modules, (tuple, list)) or not all(
        isinstance(p, str) for p in exclude_modules
    ):
        raise ValueError(
            f"exclude_modules={exclude_modules!r} is not supported; accepted: a tuple of "
            "module-name patterns (str, fnmatch syntax), e.g. ('lm_head', '*.gate')"
        )
    if not callable(make_layer):
        raise ValueError(
            f"make_layer={make_layer!r} is not supported; accepted: a callable nn.Linear -> nn.Module"
        )


def _decide(
    name: str, linear: nn.Linear, patterns: list[str], parent: nn.Module | None
) -> LayerDecision:
    def decision(category: str, reason: str = "") -> LayerDecision:
        return LayerDecision(name, linear.in_features, linear.out_features, category, reason)

    if isinstance(linear, Float8Linear):
        return decision(ALREADY, "already converted")
    if name == "":
        return decision(
            ROOT,
            "the model itself is the Linear and cannot replace itself in place; "
            "wrap it, e.g. nn.Sequential(model)",
        )
    if patterns:
        return decision(EXCLUDED, f"excluded by pattern {patterns[0]!r}")
    misaligned = [
        f"{field} {value}"
        for field, value in (("in_features", linear.in_features), ("out_features", linear.out_features))
        if value % FP8_ALIGNMENT
    ]
    if misaligned:
        verb = "is not a multiple" if len(misaligned) == 1 else "are not multiples"
        return decision(NOT_ALIGNED, f"{' and '.join(misaligned)} {verb} of {FP8_ALIGNMENT}")
    if isinstance(parent, nn.MultiheadAttention):
        return decision(
            NOT_CALLED,
            "nn.MultiheadAttention uses this layer's weight directly, never its forward, "
            "so an FP8 layer here would not run in FP8",
        )
    extra = _extra_state(linear)
    if extra:
        return decision(
            EXTRA_STATE,
            f"{type(linear).__name__} has {', '.join(extra)} beyond weight and bias, "
            "which the FP8 layer would drop",
        )
    if type(linear).forward is not nn.Linear.forward:
        return decision(CONVERTED, f"{type(linear).__name__}.forward is replaced by the FP8 GEMM")
    return decision(CONVERTED)


def _extra_state(linear: nn.Linear) -> list[str]:
    """Names of the parameters, buffers and submodules a Linear has besides weight and bias."""
    names = [n for n in linear._parameters if n not in ("weight", "bias")]
    names += list(linear._buffers)
    names += list(linear._modules)
    return names


def _replace_children(model: nn.Module, replacements: Mapping[int, nn.Module]) -> None:
    if not replacements:
        return
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):
            if child is not None and id(child) in replacements:
                setattr(parent, child_name, replacements[id(child)])


def unconvert_linears(model: nn.Module) -> int:
    """Swap every Float8Linear of ``model`` back to its high-precision Linear (same Parameters).

    Returns how many distinct layers were swapped back.
    """
    originals: dict[int, nn.Linear] = {}
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):
            if isinstance(child, Float8Linear):
                if id(child) not in originals:
                    originals[id(child)] = child.to_linear()
                setattr(parent, child_name, originals[id(child)])
    return len(originals)


def float8_layers(model: nn.Module) -> dict[str, Float8Linear]:
    """The model's Float8Linear layers, by qualified name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, Float8Linear)}


def set_fp8_enabled(model: nn.Module, enabled: bool) -> int:
    """Turn FP8 on or off in every Float8Linear (off: plain F.linear). Returns the layer count."""
    layers = float8_layers(model)
    for layer in layers.values():
        layer.enabled = enabled
    return len(layers)


def scaler_group(model: nn.Module) -> ScalerGroup:
    """Every scaler of the model, named ``"<layer name>.<role>"``; build once, use each step."""
    return ScalerGroup(
        {
            f"{name}.{role}": scaler
            for name, layer in float8_layers(model).items()
            for role, scaler in layer.scalers().items()
        }
    )


def high_precision_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under their original names, in their high-precision dtype.

    This is ``model.state_dict()``: Float8Linear keeps ``weight`` and ``bias`` and
    keeps its scaling state out of the state dict, so the result loads strictly
    into the unconverted model.
    """
    return model.state_dict()


def fp8_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The FP8 scaling state of every layer, flat and tensor-only (weights_only loadable)."""
    return scaler_group(model).state_dict()


def load_fp8_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Restore :func:`fp8_state_dict` into a model converted the same way."""
    scaler_group(model).load_state_dict(state)
