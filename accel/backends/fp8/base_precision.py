"""The base precision of FP8: what runs outside the FP8 GEMMs, on every FP8 backend.

FP8 only replaces the matrix products of the converted Linear layers. Attention, norms,
embeddings, activations and the loss run in the recipe's `base_precision`:

| base_precision | weights | outside the FP8 GEMMs | loss scaling | as in |
|---|---|---|---|---|
| `bf16` (default) | fp32 | torch.autocast(bf16) | no | Accelerate's fp8, NeMo's bf16_with_fp8_mixed |
| `fp16` | fp32 | torch.autocast(fp16) | LossScaler | NeMo's fp16_with_fp8_mixed |
| `fp32` | fp32 | fp32 | no | accel before the base precision existed |
| `bf16-true` | bf16 | bf16 | no | Lightning's "transformer-engine" |
| `16-true` | fp16 | fp16 | no | Lightning's "transformer-engine-float16" |

Each base *is* the precision backend of the same name (amp.py, half.py, full.py), used by
composition: the FP8 backend hands it the forward to wrap, the backward, the unscaling and the
step, so FP8 with a bf16 base behaves exactly as bf16 mixed does outside the FP8 layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel.backends.amp import BF16Mixed, FP16Mixed
from accel.backends.base import Forward, ForwardWrapper, PrecisionBackend
from accel.backends.full import FullPrecision
from accel.backends.half import BF16True, HalfTrue
from accel.backends.loss_scaler import LossScaler
from accel.kwargs_handlers import Handlers


class _BF16Base(BF16Mixed):
    name = "fp8"  # the slow-bf16 warning then names the precision the user asked for


class _FP16Base(FP16Mixed):
    name = "fp8"


class _BF16TrueBase(BF16True):
    name = "fp8"


class _HalfTrueBase(HalfTrue):
    name = "fp8"


BASE_BACKENDS: dict[str, type[PrecisionBackend]] = {
    "bf16": _BF16Base,
    "fp16": _FP16Base,
    "fp32": FullPrecision,
    "bf16-true": _BF16TrueBase,
    "16-true": _HalfTrueBase,
}
"""FP8RecipeKwargs.base_precision -> the precision backend that runs everything but the FP8 GEMMs."""


def create_base(base_precision: str, device: torch.device, handlers: Handlers) -> PrecisionBackend:
    """The backend of `base_precision` (it warns once where its 16-bit dtype is slow on `device`)."""
    return BASE_BACKENDS[base_precision](device, handlers)


def loss_scaler_of(base: PrecisionBackend) -> LossScaler | None:
    """The base's loss scaler (fp16 mixed), or None."""
    return getattr(base, "loss_scaler", None)


class FP8Forward(ForwardWrapper):
    """Base of the FP8 backends' forward wrappers: the model's forward run in the base precision.

    `__wrapped__` stays the model's own forward (what `unwrap_model` restores); `_run` is that
    forward wrapped by the base precision (autocast, or casting inputs), or the forward itself
    for an fp32 base. One wrapper, so that nothing is nested.
    """

    __slots__ = ("_run",)

    def __init__(self, forward: Forward, base: PrecisionBackend) -> None:
        super().__init__(forward)
        self._run: Callable[..., Any] = base.wrap_forward(forward)

    @property
    def module(self) -> torch.nn.Module:
        """The model whose forward this is."""
        return self.__wrapped__.__self__  # type: ignore[attr-defined]  # __wrapped__ is the model's bound forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(*args, **kwargs)
