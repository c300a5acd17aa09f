"""What the te and ao backends can read for FP8 health (health.py), from the models they converted.

TransformerEngine keeps, per module, its delayed-scaling state in `fp8_meta`: an amax history and
a scale for each forward tensor (input, weight, output of each GEMM) and backward tensor (output
gradient, input gradient); it counts no saturated or flushed values. torchao's Float8Linear scales
each tensor from its own amax inside the GEMM and keeps nothing, so only the weight, which is there
between steps, can be read: its amax and scale computed as torchao computes them, and the fractions
its cast saturates and flushes, at report steps only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import nn

from accel.backends.fp8.health import Readings, cast_fractions

TE_FORWARD_ROLES = ("input", "weight", "output")
"""TransformerEngine's forward FP8 tensors of one GEMM, in fp8_meta['scaling_fwd'] order."""
TE_BACKWARD_ROLES = ("grad_output", "grad_input")
"""Its backward FP8 tensors of one GEMM, in fp8_meta['scaling_bwd'] order."""
TE_REPORTED = ("input", "weight", "grad_output")
AO_EPS = 1e-12
"""torchao's smallest amax (torchao.float8.float8_utils.EPS), which keeps the scale finite."""


def _named_layers(models: Iterable[nn.Module], has: Any) -> dict[str, nn.Module]:
    """Every module of `models` for which `has(module)` holds, by qualified name (prefixed when several models)."""
    models = list(models)
    found: dict[str, nn.Module] = {}
    for index, model in enumerate(models):
        prefix = f"model{index}." if len(models) > 1 else ""
        found.update({prefix + name: module for name, module in model.named_modules() if has(module)})
    return found


def te_readings(models: Iterable[nn.Module]) -> Readings:
    """Per TE module with delayed-scaling state: amax (the history window's largest, what the scale
    derives from) and scale of each GEMM's input, weight and output gradient. A module with two GEMMs
    (LayerNormMLP) names them 'gemm1_input', 'gemm2_input', ... Current and block scaling keep no such
    state: those modules give nothing."""
    columns: list[torch.Tensor] = []
    names: list[tuple[str, str]] = []
    layers = _named_layers(models, lambda m: isinstance(getattr(m, "fp8_meta", None), dict))
    for name, module in layers.items():
        meta: dict[str, Any] = getattr(module, "fp8_meta")  # noqa: B009  # nn.Module's __getattr__ would type it a Tensor
        for key, roles in (("scaling_fwd", TE_FORWARD_ROLES), ("scaling_bwd", TE_BACKWARD_ROLES)):
            state = meta.get(key)
            history, scale = getattr(state, "amax_history", None), getattr(state, "scale", None)
            if history is None or scale is None or history.numel() == 0:
                continue
            amax = history.reshape(-1, scale.numel()).amax(dim=0)
            gemms = scale.numel() // len(roles)
            for index in range(scale.numel()):
                gemm, role = divmod(index, len(roles))
                if roles[role] in TE_REPORTED:
                    tensor = roles[role] if gemms == 1 else f"gemm{gemm + 1}_{roles[role]}"
                    names.append((name, tensor))
                    columns += [amax[index], scale.reshape(-1)[index]]
    if not columns:
        return {}
    values = iter(torch.stack([c.float().to(columns[0].device) for c in columns]).tolist())  # one sync
    return {f"{name}.{tensor}": {"amax": next(values), "scale": next(values)} for name, tensor in names}


def ao_readings(models: Iterable[nn.Module], config: Any) -> Readings:
    """Per torchao Float8Linear: its weight's amax, scale (the smallest, for per-row scales), and the
    fractions its FP8 cast saturates and flushes, computed as torchao's dynamic scaling casts it."""
    from torchao.float8.config import ScalingGranularity

    weight_cast = config.cast_config_weight
    rowwise = weight_cast.scaling_granularity == ScalingGranularity.AXISWISE
    dtype = weight_cast.target_dtype or torch.float8_e4m3fn
    limit = torch.finfo(dtype).max
    names, columns = [], []
    for name, layer in _named_layers(models, _is_ao_float8_linear).items():
        weight: Any = cast(torch.Tensor, layer.weight).detach()
        weight = weight.to_local() if hasattr(weight, "to_local") else weight  # a DTensor under FSDP2: this shard
        amax = weight.abs().amax(dim=-1, keepdim=True) if rowwise else weight.abs().amax()
        scale = limit / amax.float().clamp(min=AO_EPS)
        if getattr(config, "round_scales_to_power_of_2", False):
            scale = torch.exp2(torch.floor(torch.log2(scale)))
        saturated, underflowed = cast_fractions(weight, scale, dtype)
        names.append(f"{name}.weight")
        columns += [amax.max().float(), scale.min(), saturated, underflowed]
    if not columns:
        return {}
    values = iter(torch.stack(columns).tolist())  # one sync
    keys = ("amax", "scale", "saturated", "underflowed")
    return {name: {key: next(values) for key in keys} for name in names}


def _is_ao_float8_linear(module: nn.Module) -> bool:
    from torchao.float8.float8_linear import Float8Linear

    return isinstance(module, Float8Linear)
