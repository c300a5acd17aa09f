"""Swap nn.Linear layers for quantized ones in place, and build models quantized from the start.

Needs bitsandbytes (imports accel.quantization.layers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import nn

from accel.backends.conversion import replace_layers
from accel.quantization.layers import QuantLinear4bit, QuantLinear8bit, layer_class
from accel.quantization.modes import QuantMode
from accel.quantization.plan import QuantizationReport

_HOOKS = (
    "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_post_hooks",
)


def quantized_layer(linear: nn.Linear, mode: QuantMode, compute_dtype: torch.dtype) -> QuantLinear4bit | QuantLinear8bit:
    """A bitsandbytes layer with `linear`'s weight quantized (on its device), the same bias Parameter,
    its hooks, and its train/eval mode."""
    layer = layer_class(mode)(
        linear.in_features, linear.out_features, bias=linear.bias is not None, mode=mode,
        compute_dtype=compute_dtype, device="meta",
    )
    layer.quantize_weight(linear.weight.data)
    if mode.trainable_weight:
        layer.weight.requires_grad_(linear.weight.requires_grad)
    if linear.bias is not None:
        layer.bias = linear.bias  # the same Parameter: an optimizer built before prepare still trains it
    for hooks in _HOOKS:
        if hasattr(linear, hooks):
            getattr(layer, hooks).update(getattr(linear, hooks))
    layer.train(linear.training)
    return layer


def quantize_model(
    model: nn.Module, report: QuantizationReport, mode: QuantMode, compute_dtype: torch.dtype
) -> list[nn.Parameter]:
    """Replace, in place, every layer `report` marks converted; return the weights that were replaced."""
    modules = dict(model.named_modules(remove_duplicate=False))
    replaced = [modules[d.name].weight for d in report.converted]
    with torch.no_grad():
        # The quantization plan takes nn.Linear layers only.
        replace_layers(model, report, lambda linear: quantized_layer(cast(nn.Linear, linear), mode, compute_dtype))
    return replaced


@contextlib.contextmanager
def building_quantized(mode: QuantMode, compute_dtype: torch.dtype) -> Iterator[None]:
    """Inside, `torch.nn.Linear(...)` builds a bitsandbytes layer whose weight is quantized as soon as it
    is initialised, so that at most one layer's full-precision weight exists at a time.

    Inside the block the layers are instances of the patched `torch.nn.Linear` (code that re-initialises
    the weights of `isinstance(m, nn.Linear)` modules then fails loudly on the quantized weight instead
    of being skipped); on leaving it they become ordinary accel layers (picklable, one class per mode).
    """
    base = layer_class(mode)
    built: list[nn.Module] = []

    def __init__(
        self: Any, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None
    ) -> None:
        base.__init__(self, in_features, out_features, bias=bias, mode=mode, compute_dtype=compute_dtype, device=device)
        if dtype is not None and self.bias is not None:
            self.bias.data = self.bias.data.to(dtype)
        if self.weight.device.type != "meta":
            self.quantize_weight(self.weight.data)
        built.append(self)

    building = cast(type[nn.Linear], type(base.__name__, (base,), {"__init__": __init__, "__module__": base.__module__}))
    original = torch.nn.Linear
    torch.nn.Linear = building  # type: ignore[misc]  # patching the class on purpose, for the duration of the block
    try:
        yield
    finally:
        torch.nn.Linear = original  # type: ignore[misc]  # restoring the patched class
        for layer in built:
            layer.__class__ = base
