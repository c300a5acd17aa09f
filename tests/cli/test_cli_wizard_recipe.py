"""The wizard's FP8 recipe questions offer what the chosen backend runs here, by the backend's own checks."""

from __future__ import annotations

import pytest
import torch

from accel.cli.config import wizard_recipe
from accel.settings import FP8_SETTINGS_BY_KEY

CPU = torch.device("cpu")


def offered(backend: str, key: str, **answers: object) -> list[str]:
    """The choices of recipe field `key` the wizard lets the user pick for `backend` after `answers`."""
    given = {"fp8_backend": backend, **{FP8_SETTINGS_BY_KEY[k].name: v for k, v in answers.items()}}
    setting = FP8_SETTINGS_BY_KEY[key]
    return [c for c in setting.kind.choices if wizard_recipe.problem({**given, setting.name: c}, CPU) is None]


def asked(backend: str) -> list[str]:
    return [s.yaml_key for s in wizard_recipe.recipe_fields() if wizard_recipe.honoured(s, {"fp8_backend": backend}, CPU)]


def test_native_offers_its_scalings_and_every_field() -> None:
    assert offered("native", "scaling") == ["delayed", "current"]
    assert asked("native") == ["scaling", "base_precision", "fp8_format", "margin", "amax_history_len",
                               "amax_compute_algo", "optimization_level", "use_autocast_during_eval",
                               "exclude_modules", "small_layer_dim", "fp8_params"]


def test_ao_offers_current_scalings_and_only_the_fields_it_honours() -> None:
    pytest.importorskip("torchao")
    assert offered("ao", "scaling") == ["current", "rowwise", "rowwise_with_gw_hp"]
    assert asked("ao") == ["scaling", "base_precision", "fp8_format", "use_autocast_during_eval", "exclude_modules",
                           "small_layer_dim"]
    assert offered("ao", "fp8_format", scaling="rowwise") == ["E4M3"]  # torchao's rowwise recipe is E4M3 only


def test_a_refused_value_says_why_in_a_menu_line() -> None:
    reason = wizard_recipe.problem({"fp8_backend": "native", "fp8_scaling": "mxfp8"}, CPU)
    assert reason is not None
    from accel.cli.config.prompts import short_reason

    assert short_reason(reason) == "cannot run on the 'native' FP8 backend; it runs scaling 'delayed', 'current'"


def test_base_precisions_are_all_offered_and_the_slow_ones_marked() -> None:
    assert offered("native", "base_precision") == ["bf16", "fp16", "fp32", "bf16-true", "16-true"]
    assert not wizard_recipe._slow("fp32", CPU)
