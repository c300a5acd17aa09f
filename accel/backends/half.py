"""True low precision: weights, inputs and compute all in one dtype (16-true, bf16-true).

Also the base of 64-true. There is no autocast and no fp32 master copy: the optimizer
updates the low-precision weights directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from accel._tree import map_tensors
from accel._warnings import warn_once
from accel.backends.base import Forward, ForwardWrapper, PrecisionBackend
from accel.backends.capability import slow_dtype_reason
from accel.kwargs_handlers import AutocastKwargs, Handlers


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Make `dtype` torch's default floating dtype inside the block, restoring it even on error."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class CastInputsForward(ForwardWrapper):
    """A model's forward that first casts floating-point inputs to the model's dtype."""

    __slots__ = ("_dtype",)

    def __init__(self, forward: Forward, dtype: torch.dtype) -> None:
        super().__init__(forward)
        self._dtype = dtype

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = map_tensors(self._cast, (args, kwargs))
        return self.__wrapped__(*args, **kwargs)

    def _cast(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self._dtype) if tensor.is_floating_point() else tensor


class TruePrecision(PrecisionBackend):
    """Weights and compute in `param_dtype`: the model is cast, floating inputs too."""

    orphan_optimizer_is_error = True
    """The optimizer updates the cast weights themselves: one over other (fp32) tensors trains nothing."""

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        reason = slow_dtype_reason(device, self.compute_dtype)
        if reason is not None:
            warn_once(f"mixed_precision={self.name!r} will be slow here: {reason}. It runs as asked.")

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.param_dtype)

    def wrap_forward(self, forward: Forward) -> Forward:
        return CastInputsForward(forward, self.param_dtype)

    def init_context(self) -> AbstractContextManager[Any]:
        return default_dtype(self.param_dtype)

    def autocast(self, handler: AutocastKwargs | None = None) -> AbstractContextManager[Any]:
        if handler is not None and not handler.enabled:
            return contextlib.nullcontext()
        return default_dtype(self.param_dtype)


class HalfTrue(TruePrecision):
    """16-true: fp16 weights and compute."""

    name = "16-true"
    param_dtype = compute_dtype = torch.float16

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Refuse an `eps` that fp16 rounds to 0: Adam would divide 0 by 0 and write NaN into the weights."""
        for index, group in enumerate(optimizer.param_groups):
            eps = group.get("eps")
            if isinstance(eps, float) and eps > 0 and torch.tensor(eps, dtype=torch.float16) == 0:
                raise ValueError(
                    f"{type(optimizer).__name__} param_groups[{index}]['eps']={eps!r} rounds to 0 in fp16, so with "
                    "mixed_precision='16-true' any gradient entry that is exactly 0 makes its weight NaN. "
                    "Use eps >= 1e-7 (1e-6 is common for fp16), or mixed_precision='fp16'."
                )


class BF16True(TruePrecision):
    """bf16-true: bf16 weights and compute."""

    name = "bf16-true"
    param_dtype = compute_dtype = torch.bfloat16
