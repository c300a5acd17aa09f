"""Preparing a model for a precision, and undoing the wrapping again."""

from __future__ import annotations

import torch
from torch import nn

from accel.backends.base import ForwardWrapper, PrecisionBackend


def prepare_model(model: nn.Module, backend: PrecisionBackend, device: torch.device, place: bool) -> nn.Module:
    """Move `model` to `device`, convert it for the precision and install its forward wrapper.

    Preparing a model twice (by one Accelerator or by several in turn) leaves one wrapper.
    """
    restore_forward(model)
    if place:
        model.to(device)
    model = backend.convert_module(model)
    forward = model.forward
    wrapped = backend.wrap_forward(forward)
    if wrapped is not forward:
        model.forward = wrapped  # type: ignore[method-assign]
    return model


def restore_forward(model: nn.Module) -> None:
    """Remove the forward wrapper accel installed on `model`, if any."""
    wrapper = model.__dict__.get("forward")
    if not isinstance(wrapper, ForwardWrapper):
        return
    original = wrapper.__wrapped__
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is type(model).forward:
        del model.forward
    else:
        model.forward = original  # type: ignore[method-assign]


def unwrap_model(model: nn.Module, *, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> nn.Module:
    """The user's model inside DDP / DataParallel (and torch.compile unless kept).

    With `keep_fp32_wrapper=False` the precision's forward wrapper is removed as well.
    """
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif not keep_torch_compile and isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
            model = model._orig_mod  # type: ignore[assignment]
        else:
            break
    if not keep_fp32_wrapper:
        restore_forward(model)
    return model
