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
                               "exclude_modules", "small_layer_dim", "fp8_params", "health_interval"]


def test_ao_offers_current_scalings_and_only_the_fields_it_honours() -> None:
    pytest.importorskip("torchao")
    assert offered("ao", "scaling") == ["current", "rowwise", "rowwise_with_gw_hp", "mxfp8"]  # mxfp8 emulated here
    assert asked("ao") == ["scaling", "base_precision", "fp8_format", "use_autocast_during_eval", "exclude_modules",
                           "small_layer_dim", "health_interval"]
    assert offered("ao", "fp8_format", scaling="rowwise") == ["E4M3"]  # torchao's rowwise recipe is E4M3 only


def test_a_refused_value_says_why_in_a_menu_line() -> None:
    reason = wizard_recipe.problem({"fp8_backend": "native", "fp8_scaling": "mxfp8"}, CPU)
    assert reason is not None
    from accel.cli.config.prompts import short_reason

    assert short_reason(reason) == "cannot run on the 'native' FP8 backend; it runs scaling 'delayed', 'current'"


def test_base_precisions_are_all_offered_and_the_slow_ones_marked() -> None:
    assert offered("native", "base_precision") == ["bf16", "fp16", "fp32", "bf16-true", "16-true"]
    assert not wizard_recipe._slow("fp32", CPU)


def test_the_defaults_line_names_the_scaling_the_backend_runs_not_a_dash() -> None:
    native = {s.yaml_key: wizard_recipe.shown_default(s, "native") for s in wizard_recipe.recipe_fields()}
    assert native["scaling"] == "delayed" and native["exclude_modules"] == "none"
    assert wizard_recipe.shown_default(FP8_SETTINGS_BY_KEY["scaling"], "ao") == "current"


def test_backend_menu_reasons_fit_a_line() -> None:
    """te and msamp reasons carry install commands in parentheses: the menu shows the gist (accel env the rest)."""
    from accel.cli import capabilities
    from accel.cli.config.prompts import MENU_REASON_WIDTH, short_reason

    for name, reason in capabilities.fp8_backend_status(CPU).items():
        brief = short_reason(reason)
        assert brief is None or (len(brief) <= MENU_REASON_WIDTH and "(" not in brief and "pip install" not in brief), name
    assert short_reason("A (b (c) d) e. More.") == "A e"
    assert short_reason("x" * 300) == "x" * (MENU_REASON_WIDTH - 3) + "..."


def test_choosing_msamp_says_it_is_unmaintained_and_what_to_use(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where MS-AMP can run (a CUDA GPU with it built), the menu marks it and choosing it prints the note."""
    from accel.cli import capabilities

    menus: list[list[tuple[str, str, object]]] = []

    def choose_msamp(question: str, options: list, default: object) -> str:
        menus.append([(o.value, o.title, o.unavailable) for o in options])
        return "msamp"

    monkeypatch.setattr(capabilities, "fp8_backend_status", lambda device: dict.fromkeys(capabilities.FP8_BACKEND_NAMES))
    monkeypatch.setattr(wizard_recipe, "ask_select", choose_msamp)
    monkeypatch.setattr(wizard_recipe, "ask_yes_no", lambda question, default: False)
    monkeypatch.setattr(wizard_recipe, "honoured", lambda setting, answers, device: False)
    monkeypatch.setattr(wizard_recipe, "_say_if_slow", lambda answers, device: None)
    assert wizard_recipe.ask_recipe({}, CPU) == {"fp8_backend": "msamp"}
    assert menus == [[("native", "native", None), ("te", "te", None), ("ao", "ao", None),
                      ("msamp", "msamp (unmaintained upstream)", None)]]
    out = capsys.readouterr().out
    assert "Note: MS-AMP is unmaintained upstream (no commits since December 2025; Accelerate marks it deprecated)." in out
    assert "backend='native' runs MS-AMP's recipe (optimization_level O1 or O2)" in out
