"""fp16 and bf16 mixed precision: fp32 weights, torch.autocast, and a GradScaler for fp16."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from accel._tree import map_tensors
from accel._warnings import warn_once
from accel.backends.base import Forward, ForwardWrapper, PrecisionBackend
from accel.backends.capability import slow_dtype_reason
from accel.backends.loss_scaler import LossScaler
from accel.backends.masters import MasterWeights, UpcastParameter
from accel.kwargs_handlers import AutocastKwargs, GradScalerKwargs, Handlers


class AutocastForward(ForwardWrapper):
    """A model's forward run under torch.autocast; its 16-bit float outputs cast to fp32 when asked.

    Runs on every forward, so it does as little Python as it can: the autocast context comes from
    a callable built at prepare time (`autocast_builder`: the options are frozen), and a plain
    tensor output, the common case, is cast without walking a structure (`map_tensors`).
    """

    __slots__ = ("_autocast", "_cast_outputs")

    def __init__(self, forward: Forward, autocast: Callable[[], AbstractContextManager[Any]], cast_outputs: bool):
        super().__init__(forward)
        self._autocast = autocast
        self._cast_outputs = cast_outputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast():
            output = self.__wrapped__(*args, **kwargs)
        if not self._cast_outputs:
            return output
        if isinstance(output, torch.Tensor):
            return output.float() if output.dtype in HALF_DTYPES else output
        return map_tensors(_to_fp32, output)


HALF_DTYPES: frozenset[torch.dtype] = frozenset({torch.float16, torch.bfloat16})
"""The dtypes whose outputs are cast to fp32 (Accelerate's `convert_to_fp32`); others (fp32,
fp64, integers, FP8) are returned as they are."""


def _to_fp32(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as fp32 when it is fp16 or bf16, else `tensor` itself."""
    return tensor.float() if tensor.dtype in HALF_DTYPES else tensor


class _MixedPrecision(PrecisionBackend):
    """fp32 weights (16-bit trainable ones made float32 masters at prepare); matrix products in
    `compute_dtype` under torch.autocast."""

    native_amp = True

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        self._autocast_kwargs = handlers.get(AutocastKwargs)
        self.masters = MasterWeights(self.name)
        reason = slow_dtype_reason(device, self.compute_dtype)
        if reason is not None:
            warn_once(f"mixed_precision={self.name!r} will be slow here: {reason}. It runs as asked.")

    def check_masters(self, modules: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer]) -> None:
        self.masters.check(modules, optimizers)

    def keep_masters(self, module: nn.Module) -> None:
        self.masters.keep(module)

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self.masters.check_optimizer(optimizer)

    @property
    def upcast_parameters(self) -> tuple[UpcastParameter, ...]:
        return tuple(self.masters.upcast)

    def autocast(self, handler: AutocastKwargs | None = None) -> AbstractContextManager[Any]:
        return self.autocast_builder(handler)()

    def autocast_builder(self, handler: AutocastKwargs | None = None) -> Callable[[], AbstractContextManager[Any]]:
        """A callable that makes this precision's torch.autocast with `handler`'s options (default:
        the Accelerator's). Built once for a prepared model's forward, which then pays for no option
        lookups per call; the handlers are frozen and the device fixed, so nothing goes stale."""
        options = handler if handler is not None else self._autocast_kwargs
        # Positional, in torch.autocast's order (device_type, dtype, enabled, cache_enabled): a partial
        # without keywords is called through the fast vectorcall path, without a kwargs dict per call.
        return functools.partial(
            torch.autocast, self.device.type, self.compute_dtype, options.enabled, options.cache_enabled
        )

    def wrap_forward(self, forward: Forward) -> Forward:
        return AutocastForward(forward, self.autocast_builder(), self._autocast_kwargs.convert_outputs_to_fp32)


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
        self.loss_scaler = LossScaler(device, handlers.get(GradScalerKwargs))

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backward of the scaled loss: what LossScaler.backward does, without its call (once per step)."""
        self.loss_scaler.scaler.scale(loss).backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.loss_scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        return self.loss_scaler.step(optimizer, closure)

    def stats(self) -> dict[str, float]:
        return self.loss_scaler.stats()

    def state_dict(self) -> dict[str, Any]:
        return self.loss_scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loss_scaler.load_state_dict(state)
