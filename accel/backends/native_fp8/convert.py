"""Swap a model's linear layers (nn.Linear, transformers' Conv1D) for FP8 layers, and report on every one.

Also the model-level helpers around the swap: undoing it, the state dict with
the original names, and the FP8 scaling state saved and restored beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import torch
from torch import nn

from accel.backends.conversion import ConversionReport, LayerDecision, is_conv1d, plan_conversion, replace_layers
from accel.backends.fp8.small_layers import SmallLayerRule
from accel.backends.native_fp8.linear import Float8Linear
from accel.backends.native_fp8.scaler_group import ScalerGroup

__all__ = ["ConversionReport", "LayerDecision"]


def convert_linears(
    model: nn.Module,
    *,
    exclude_modules: tuple[str, ...] = (),
    make_layer: Callable[[nn.Linear], nn.Module],
    make_conv1d: Callable[[nn.Module], nn.Module] | None = None,
    small_layers: SmallLayerRule | None = None,
) -> ConversionReport:
    """Replace, in place, each eligible nn.Linear of ``model`` by ``make_layer(linear)``, and
    each eligible transformers Conv1D by ``make_conv1d(conv1d)`` (without it, Conv1Ds are skipped).

    Eligibility is accel's one rule (accel.backends.conversion.plan_conversion, with the FP8
    backend's ``small_layers`` filter, none by default); a
    Float8Linear (Float8Conv1D too) counts as already converted. Never stops at a skipped
    layer; returns the report of every linear layer and of the other weight matrices.
    """
    for name, value in (("make_layer", make_layer), ("make_conv1d", make_conv1d)):
        if not callable(value) and not (name == "make_conv1d" and value is None):
            raise ValueError(f"{name}={value!r} is not supported; accepted: a callable (layer) -> nn.Module")
    refusal = None if make_conv1d is not None else "convert_linears(make_conv1d=None) converts nn.Linear only"
    report = plan_conversion(
        model, exclude_modules=exclude_modules, is_converted=lambda m: isinstance(m, Float8Linear),
        conv1d_refusal=refusal, small_layers=small_layers,
    )
    # The layers the report converts are nn.Linear, or Conv1D when make_conv1d is given.
    replace_layers(
        model, report,
        lambda m: make_conv1d(m) if make_conv1d is not None and is_conv1d(m) else make_layer(cast(nn.Linear, m)),
    )
    return report


def unconvert_linears(model: nn.Module) -> int:
    """Swap every Float8Linear of ``model`` back to its high-precision Linear (a Float8Conv1D to its
    Conv1D), with the same Parameters.

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
