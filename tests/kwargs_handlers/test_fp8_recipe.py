"""FP8RecipeKwargs: TransformerEngine's defaults, Accelerate's spellings, and every bad value."""

from __future__ import annotations

import pytest

from accel import FP8RecipeKwargs


def test_defaults_are_transformer_engines() -> None:
    recipe = FP8RecipeKwargs()
    assert recipe.backend == "auto"
    assert (recipe.fp8_format, recipe.margin, recipe.amax_history_len, recipe.amax_compute_algo) == (
        "HYBRID", 0, 1024, "max",
    )
    assert (recipe.scaling, recipe.optimization_level, recipe.use_autocast_during_eval) == (None, "O1", False)
    assert recipe.exclude_modules == ()


def test_accelerate_spellings_and_case_are_accepted() -> None:
    recipe = FP8RecipeKwargs(
        backend="TE", opt_level="o2", amax_history_length=16, amax_compute_algorithm="MOST_RECENT", fp8_format="e4m3"
    )
    assert (recipe.backend, recipe.optimization_level, recipe.amax_history_len) == ("te", "O2", 16)
    assert (recipe.amax_compute_algo, recipe.fp8_format) == ("most_recent", "E4M3")
    assert recipe.explicit_fields == {
        "backend", "optimization_level", "amax_history_len", "amax_compute_algo", "fp8_format",
    }


def test_a_field_given_under_both_names_raises() -> None:
    with pytest.raises(TypeError, match="twice"):
        FP8RecipeKwargs(opt_level="O1", optimization_level="O2")


def test_exclude_modules_list_becomes_a_tuple() -> None:
    assert FP8RecipeKwargs(exclude_modules=["lm_head", "blocks.0.*"]).exclude_modules == ("lm_head", "blocks.0.*")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"backend": "transformer_engine"}, ValueError, "backend='transformer_engine'.*accepted values: 'auto', 'te'"),
        ({"backend": "nativ"}, ValueError, "Did you mean 'native'"),
        ({"fp8_format": "E5M2"}, ValueError, "pure E5M2 training"),
        ({"fp8_format": "FP8"}, ValueError, "fp8_format='FP8'"),
        ({"margin": -1}, ValueError, r"margin=-1 must be an int >= 0"),
        ({"margin": 1.5}, TypeError, "margin=1.5 must be an int"),
        ({"amax_history_len": 0}, ValueError, "amax_history_len=0 must be an int >= 1"),
        ({"amax_compute_algo": "mean"}, ValueError, "amax_compute_algo='mean'.*'max', 'most_recent'"),
        ({"optimization_level": "O3"}, ValueError, "optimization_level='O3'.*'O1', 'O2'"),
        ({"scaling": "dynamic"}, ValueError, "scaling='dynamic'.*'delayed', 'current'"),
        ({"use_autocast_during_eval": "yes"}, TypeError, "use_autocast_during_eval"),
        ({"exclude_modules": "lm_head"}, TypeError, r"exclude_modules=\['lm_head'\]"),
        ({"exclude_modules": ["ok", 3]}, TypeError, "list or tuple of strings"),
    ],
)
def test_bad_values_raise_at_construction(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        FP8RecipeKwargs(**kwargs)
