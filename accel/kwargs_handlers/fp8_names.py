"""Accelerate's per-backend FP8 handler names, as spellings of the one FP8RecipeKwargs.

`TERecipeKwargs(...)` is `FP8RecipeKwargs(backend="te", ...)`, and so on: the same fields and
checks (a field the backend cannot honour raises). They are functions, not classes, so that
there is one recipe type; `isinstance(handler, FP8RecipeKwargs)` holds for what they return.
"""

from __future__ import annotations

from typing import Any

from accel.kwargs_handlers.fp8 import FP8RecipeKwargs


def TERecipeKwargs(**fields: Any) -> FP8RecipeKwargs:  # noqa: N802 - Accelerate's class name
    """`FP8RecipeKwargs(backend="te", **fields)` (TransformerEngine)."""
    return FP8RecipeKwargs(backend="te", **fields)


def MSAMPRecipeKwargs(**fields: Any) -> FP8RecipeKwargs:  # noqa: N802
    """`FP8RecipeKwargs(backend="msamp", **fields)` (MS-AMP; `opt_level="O1"` or `"O2"`)."""
    return FP8RecipeKwargs(backend="msamp", **fields)


def AORecipeKwargs(**fields: Any) -> FP8RecipeKwargs:  # noqa: N802
    """`FP8RecipeKwargs(backend="ao", **fields)` (torchao)."""
    return FP8RecipeKwargs(backend="ao", **fields)
