"""ACCEL_* variables: a misspelt one is named with the closest known name when an Accelerator is
built; a setting's variable that does not parse is refused naming it; the known names come from
the schema."""

from __future__ import annotations

import warnings

import pytest

from accel import Accelerator, settings
from accel.settings.environment import CONFIG_FILE_VARIABLE, known_variables, unknown_variables


def _accelerator_warnings() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Accelerator()
    return [str(w.message) for w in caught]


def test_a_misspelt_variable_warns_once_with_the_closest_known_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_MIXED_PRECISON", "fp16")
    first = [m for m in _accelerator_warnings() if "ACCEL_MIXED_PRECISON" in m]
    assert len(first) == 1
    assert "accel reads no such variable" in first[0] and "Did you mean ACCEL_MIXED_PRECISION?" in first[0]
    assert not [m for m in _accelerator_warnings() if "ACCEL_MIXED_PRECISON" in m]


def test_a_misspelt_fp8_variable_gets_the_fp8_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_FP8_AMAX_HISTORY_LENGTH", "16")
    assert any("Did you mean ACCEL_FP8_AMAX_HISTORY_LEN?" in m for m in _accelerator_warnings())


def test_what_accel_launch_sets_draws_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    given = {"mixed_precision": "bf16", "num_processes": 1, "gpu_ids": "all", "fp8_margin": 1}
    launched = settings.to_environment(given)
    for name, value in {**launched, CONFIG_FILE_VARIABLE: "config.yaml"}.items():
        monkeypatch.setenv(name, value)
    assert not [m for m in _accelerator_warnings() if "ACCEL_" in m]


def test_known_names_are_every_setting_of_the_schema() -> None:
    names = {s.env_var for s in settings.ALL_SETTINGS} | {CONFIG_FILE_VARIABLE}
    assert names <= known_variables()
    assert {"ACCEL_FP8_MARGIN", "ACCEL_NUM_PROCESSES", "ACCEL_GPU_IDS"} <= known_variables()
    assert unknown_variables({"ACCEL_MIXED_PRECISION": "no", "ACCEL_NUM_PROCESS": "2", "PATH": "/"}) == {
        "ACCEL_NUM_PROCESS": "ACCEL_NUM_PROCESSES"
    }


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ACCEL_NUM_PROCESSES", "abc", "ACCEL_NUM_PROCESSES='abc' is not an integer; it must be an int >= 1"),
        ("ACCEL_NUM_MACHINES", "0", "ACCEL_NUM_MACHINES=0 must be an int >= 1"),
        ("ACCEL_MAIN_PROCESS_PORT", "http", "ACCEL_MAIN_PROCESS_PORT='http' is not an integer"),
    ],
)
def test_a_launcher_variable_that_does_not_parse_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=message):
        Accelerator()


def test_num_processes_without_the_processes_running_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_NUM_PROCESSES", "4")
    assert any("`accel launch --num_processes 4 script.py`" in m for m in _accelerator_warnings())
