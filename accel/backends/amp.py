"""fp16 and bf16 mixed precision: fp32 weights, torch.autocast, and a GradScaler for fp16."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from accel._tree import map_tensors
from accel._warnings import warn_once
from accel.backends.base import Forward, ForwardWrapper, PrecisionBackend
from accel.backends.capability import slow_dtype_reason
from accel.kwargs_handlers import AutocastKwargs, GradScalerKwargs, Handlers


class AutocastForward(ForwardWrapper):
    """A model's forward run under torch.autocast."""

    __slots__ = ("_autocast", "_cast_outputs")

    def __init__(self, forward: Forward, autocast: Callable[[], AbstractContextManager[Any]], cast_outputs: bool):
        super().__init__(forward)
        self._autocast = autocast
        self._cast_outputs = cast_outputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            output = self.__wrapped__(*args, **kwargs)
        return map_tensors(_to_fp32, output) if self._cast_outputs else output


def _to_fp32(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


class _MixedPrecision(PrecisionBackend):
    """fp32 weights; matrix products in `compute_dtype` under torch.autocast."""

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        self._autocast_kwargs = handlers.get(AutocastKwargs)
        reason = slow_dtype_reason(device, self.compute_dtype)
        if reason is not None:
            warn_once(f"mixed_precision={self.name!r} will be slow here: {reason}. It runs as asked.")

    def autocast(self, handler: AutocastKwargs | None = None) -> AbstractContextManager[Any]:
        options = handler if handler is not None else self._autocast_kwargs
        return torch.autocast(
            self.device.type, dtype=self.compute_dtype, enabled=options.enabled, cache_enabled=options.cache_enabled
        )

    def wrap_forward(self, forward: Forward) -> Forward:
        return AutocastForward(forward, self.autocast, self._autocast_kwargs.convert_outputs_to_fp32)


class BF16Mixed(_MixedPrecision):
    """bf16 mixed precision: bf16 keeps fp32's range, so no loss scaling is needed."""

    name = "bf16"
    compute_dtype = torch.bfloat16


class FP16Mixed(_MixedPrecision):
    """fp16 mixed precision with dynamic loss scaling, on CUDA and on CPU alike."""

    name = "fp16"
    compute_dtype = torch.float16
    handler_types = (GradScalerKwargs,)

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        options = handlers.get(GradScalerKwargs)
        self.scaler = torch.amp.GradScaler(
            device.type,
            init_scale=options.init_scale,
            growth_factor=options.growth_factor,
            backoff_factor=options.backoff_factor,
            growth_interval=options.growth_interval,
            enabled=options.enabled,
        )
        self._scale = self.scaler.get_scale()
        self.skipped_steps = 0

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.scaler.scale(loss).backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        # A skipped step (inf/NaN gradients) is the only case in which update() lowers the scale.
        self.scaler.step(optimizer) if closure is None else self.scaler.step(optimizer, closure)
        self.scaler.update()
        scale = self.scaler.get_scale()
        stepped = not scale < self._scale
        self._scale = scale
        self.skipped_steps += not stepped
        return stepped

    def stats(self) -> dict[str, float]:
        return {"loss_scale": self._scale, "skipped_steps": self.skipped_steps}

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state["skipped_steps"])
        self._scale = self.scaler.get_scale()
