"""Accelerate's handler attributes: the handler given (or the FP8 recipe in effect), else None; read-only."""

from __future__ import annotations

import pytest

from accel import Accelerator
from accel.utils import (
    AORecipeKwargs,
    AutocastKwargs,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)

HANDLERS = ("ddp_handler", "scaler_handler", "init_handler", "autocast_handler", "profile_handler")
RECIPES = ("fp8_recipe_handler", "te_recipe_handler", "ao_recipe_handler", "msamp_recipe_handler")


def test_without_handlers_every_attribute_is_none() -> None:
    accelerator = Accelerator()
    assert [getattr(accelerator, name) for name in HANDLERS + RECIPES] == [None] * 9


def test_each_handler_given_is_given_back() -> None:
    given = {
        "ddp_handler": DistributedDataParallelKwargs(find_unused_parameters=True),
        "scaler_handler": GradScalerKwargs(init_scale=1024.0),
        "init_handler": InitProcessGroupKwargs(),
        "autocast_handler": AutocastKwargs(cache_enabled=False),
        "profile_handler": ProfileKwargs(record_shapes=True),
    }
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=list(given.values()))
    assert {name: getattr(accelerator, name) for name in HANDLERS} == given
    assert all(getattr(accelerator, name) is handler for name, handler in given.items())
    assert [getattr(accelerator, name) for name in RECIPES] == [None] * 4


def test_the_fp8_recipe_in_effect_and_the_attribute_of_the_library_that_runs_it() -> None:
    native = FP8RecipeKwargs(backend="native")
    accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[native])
    assert accelerator.fp8_recipe_handler is native
    assert (accelerator.te_recipe_handler, accelerator.ao_recipe_handler, accelerator.msamp_recipe_handler) == (None,) * 3
    pytest.importorskip("torchao.float8")
    ao = AORecipeKwargs()
    accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[ao])
    assert accelerator.fp8_recipe_handler is ao and accelerator.ao_recipe_handler is ao
    assert accelerator.te_recipe_handler is None and accelerator.msamp_recipe_handler is None


def test_fp8_without_a_recipe_reports_the_default_recipe_it_runs() -> None:
    accelerator = Accelerator(mixed_precision="fp8")
    assert isinstance(accelerator.fp8_recipe_handler, FP8RecipeKwargs)
    assert accelerator.fp8_recipe_handler == accelerator.precision.recipe


def test_assigning_one_is_refused() -> None:
    accelerator = Accelerator()
    with pytest.raises(AttributeError, match=r"accelerator.fp8_recipe_handler is read-only.*kwarg_handlers"):
        accelerator.fp8_recipe_handler = FP8RecipeKwargs()
    with pytest.raises(AttributeError, match=r"accelerator.ddp_handler is read-only"):
        accelerator.ddp_handler = DistributedDataParallelKwargs()
