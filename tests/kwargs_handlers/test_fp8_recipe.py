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
    assert (recipe.scaling, recipe.optimization_level, recipe.use_autocast_during_eval) == (None, None, False)
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


def test_base_precision_defaults_to_bf16_and_accepts_the_precision_names() -> None:
    assert FP8RecipeKwargs().base_precision == "bf16" and FP8RecipeKwargs().fp8_params is False
    for value in ("bf16", "FP16", "fp32", "BF16-true", "16-true"):
        assert FP8RecipeKwargs(base_precision=value).base_precision == value.lower()
    with pytest.raises(ValueError, match=r"FP8RecipeKwargs.base_precision='bf16-mixed' is not accepted.*'bf16'"):
        FP8RecipeKwargs(base_precision="bf16-mixed")
    with pytest.raises(TypeError, match=r"FP8RecipeKwargs.fp8_params='yes' must be True or False"):
        FP8RecipeKwargs(fp8_params="yes")


def test_with_fields_adds_explicit_fields_and_keeps_the_others() -> None:
    recipe = FP8RecipeKwargs(margin=3).with_fields(backend="te", base_precision="bf16-true")
    assert (recipe.margin, recipe.backend, recipe.base_precision) == (3, "te", "bf16-true")
    assert recipe.explicit_fields == {"margin", "backend", "base_precision"}


def test_base_precision_and_fp8_params_are_settings_like_every_field() -> None:
    from accel.settings import FP8_SETTINGS_BY_KEY
    from accel.settings.handlers import fp8_recipe_from_env

    base, params = FP8_SETTINGS_BY_KEY["base_precision"], FP8_SETTINGS_BY_KEY["fp8_params"]
    assert (base.flags[0], base.env_var, base.yaml_path) == ("--fp8_base_precision", "ACCEL_FP8_BASE_PRECISION",
                                                              "fp8_config.base_precision")
    assert (params.flags[0], params.env_var) == ("--fp8_params", "ACCEL_FP8_PARAMS")
    recipe = fp8_recipe_from_env({"ACCEL_FP8_BASE_PRECISION": "fp16", "ACCEL_FP8_PARAMS": "true"})
    assert recipe is not None and (recipe.base_precision, recipe.fp8_params) == ("fp16", True)
    with pytest.raises(ValueError, match="ACCEL_FP8_BASE_PRECISION='fp8'"):
        fp8_recipe_from_env({"ACCEL_FP8_BASE_PRECISION": "fp8"})


def test_accelerates_te_fields_are_mapped_or_refused_with_the_reason() -> None:
    recipe = FP8RecipeKwargs(use_mxfp8_block_scaling=True, interval=1, override_linear_precision=(False, False, False))
    assert recipe.scaling == "mxfp8" and recipe.explicit_fields == {"scaling"}
    assert FP8RecipeKwargs(use_mxfp8_block_scaling=False).explicit_fields == set()
    with pytest.raises(ValueError, match="interval.*never used.*removed it in 2.2"):
        FP8RecipeKwargs(interval=5)
    with pytest.raises(ValueError, match=r"override_linear_precision=\(False, False, True\).*removed it in 2.0"):
        FP8RecipeKwargs(override_linear_precision=(False, False, True))
    with pytest.raises(ValueError, match="asks for two scalings"):
        FP8RecipeKwargs(use_mxfp8_block_scaling=True, scaling="delayed")
