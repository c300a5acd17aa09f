"""The registry: canonical precision name -> the backend that runs it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from accel.backends.amp import BF16Mixed, FP16Mixed
from accel.backends.base import PrecisionBackend
from accel.backends.full import DoublePrecision, FullPrecision
from accel.backends.half import BF16True, HalfTrue
from accel.backends.names import CANONICAL_PRECISIONS, canonical_precision, implied_recipe, resolve_precision
from accel.kwargs_handlers import FP8RecipeKwargs, GradScalerKwargs, Handlers

BackendFactory = Callable[[torch.device, Handlers], PrecisionBackend]


def create_fp8_backend(device: torch.device, handlers: Handlers) -> PrecisionBackend:
    """The FP8 backend the recipe asks for (accel.backends.fp8.choice), loaded only when fp8 is asked for."""
    from accel.backends.fp8.choice import create_fp8_backend

    return create_fp8_backend(device, handlers)


BACKENDS: dict[str, BackendFactory] = {
    "no": FullPrecision,
    "fp16": FP16Mixed,
    "bf16": BF16Mixed,
    "fp8": create_fp8_backend,
    "16-true": HalfTrue,
    "bf16-true": BF16True,
    "64-true": DoublePrecision,
}
assert set(BACKENDS) == set(CANONICAL_PRECISIONS), "every precision name needs a backend"

PRECISION_SPECIFIC_HANDLERS = {
    GradScalerKwargs: (
        "mixed_precision='fp16', or 'fp8' with FP8RecipeKwargs(base_precision='fp16') or backend='msamp' "
        "(the precisions with a loss scaler)"
    ),
    FP8RecipeKwargs: "mixed_precision='fp8'",
}


def create_backend(precision: str, device: torch.device, handlers: Handlers) -> PrecisionBackend:
    """Build the backend for `precision` (any accepted spelling) on `device`.

    A name that implies FP8 recipe fields (Lightning's "transformer-engine", NeMo's
    "bf16_with_fp8_mixed", ...) builds the FP8 backend with those fields in its recipe.
    """
    name = resolve_precision(precision)
    implied = implied_recipe(name)
    if not implied:
        backend = BACKENDS[name](device, handlers)
    else:
        from accel.backends.fp8.choice import apply_precision_recipe

        handlers = apply_precision_recipe(name, implied, handlers)
        try:
            backend = BACKENDS[canonical_precision(name)](device, handlers)
        except (RuntimeError, ValueError) as error:
            fields = ", ".join(f"{field}={value!r}" for field, value in implied.items())
            raise type(error)(f"mixed_precision={name!r} (that is 'fp8' with FP8RecipeKwargs({fields})): {error}") from None
    _check_handlers_apply(backend, handlers)
    return backend


def _check_handlers_apply(backend: PrecisionBackend, handlers: Handlers) -> None:
    """A precision-specific handler given for a precision that does not use it is an error."""
    for kind, used_by in PRECISION_SPECIFIC_HANDLERS.items():
        if handlers.has(kind) and kind not in backend.handler_types:
            raise ValueError(
                f"kwarg_handlers has {kind.__name__}, which only {used_by} uses, but mixed_precision is "
                f"{backend.name!r}; nothing would read it. Remove it from kwarg_handlers, or change mixed_precision."
            )
