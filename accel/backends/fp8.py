"""mixed_precision='fp8': choose the FP8 backend that FP8RecipeKwargs(backend=...) names."""

from __future__ import annotations

import torch

from accel.backends.base import PrecisionBackend
from accel.kwargs_handlers import FP8RecipeKwargs, Handlers

FP8_BACKENDS: dict[str, type[PrecisionBackend]] = {}
"""FP8 backend name -> class. Empty until an FP8 backend is implemented."""


def create_fp8_backend(device: torch.device, handlers: Handlers) -> PrecisionBackend:
    """Build the FP8 backend the recipe asks for, or raise saying why it cannot run."""
    recipe = handlers.get(FP8RecipeKwargs)
    backend = FP8_BACKENDS.get(recipe.backend)
    if backend is None:
        raise NotImplementedError(
            f"mixed_precision='fp8' with FP8RecipeKwargs(backend={recipe.backend!r}) is not implemented in this "
            "version of accel. It will not run another precision in its place: choose mixed_precision "
            "'bf16' or 'fp16' (or 'no') until the FP8 backends land."
        )
    return backend(device, handlers)
