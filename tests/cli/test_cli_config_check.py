"""The whole configuration is checked before a process starts or a config is written, and refused in one line.

The check builds the precision backend that the launched script's Accelerator would build, from
the same ACCEL_* variables, on the same device: the FP8 recipe against its backend and the
backend against this machine included. (The wizard's side is in test_cli_wizard.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accel.cli.config.check import check_values
from accel.cli.errors import CliError

MARKER_SCRIPT = "import pathlib, sys\npathlib.Path(sys.argv[1]).write_text('ran')\n"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"mixed_precision": "fp8", "fp8_backend": "native", "fp8_scaling": "mxfp8"},
         "FP8RecipeKwargs(scaling='mxfp8') cannot run on the 'native' FP8 backend; it runs scaling 'delayed', 'current'"),
        ({"mixed_precision": "fp8", "fp8_scaling": "block"}, "cannot run on the 'native' FP8 backend"),  # auto: native here
        ({"mixed_precision": "fp8", "fp8_backend": "ao", "fp8_margin": 2},
         "FP8RecipeKwargs sets margin, which the 'ao' FP8 backend cannot honour"),
        ({"mixed_precision": "fp8", "fp8_backend": "te", "use_cpu": True}, "FP8RecipeKwargs(backend='te') cannot run here"),
    ],
)
def test_a_configuration_that_cannot_run_is_refused(values: dict, expected: str) -> None:
    with pytest.raises(CliError) as info:
        check_values(values)
    message = str(info.value)
    assert message.startswith("mixed_precision 'fp8' cannot run on cpu with this configuration: ")
    assert expected in message
    assert "\n" not in message and message.endswith("nothing was written.")


def test_a_configuration_that_runs_passes_with_its_notes() -> None:
    assert check_values({"mixed_precision": "no"}) == []
    notes = check_values({"mixed_precision": "fp8", "fp8_backend": "native", "fp8_base_precision": "bf16"})
    assert all("will be slow here" in note for note in notes)  # on a CPU without native bf16: one note


def test_config_default_writes_no_config_that_cannot_run(run_accel, tmp_path: Path, one_error_line) -> None:
    result = run_accel("config", "default", "--mixed_precision", "fp8", "--fp8_scaling", "mxfp8")
    assert result.returncode == 2
    line = one_error_line(result)
    assert line.startswith("accel config default: mixed_precision 'fp8' cannot run on cpu with this configuration")
    assert not (tmp_path / "xdg" / "accel" / "config.yaml").exists()


@pytest.mark.parametrize("processes", ["1", "2"])
def test_launch_refuses_before_starting_any_process(run_accel, tmp_path: Path, one_error_line, processes: str) -> None:
    """What the wizard once wrote (mxfp8 for native) printed 47 lines of tracebacks from two ranks."""
    config = tmp_path / "config.yaml"
    config.write_text(f"mixed_precision: fp8\nnum_processes: {processes}\nfp8_config:\n  backend: native\n"
                      "  scaling: mxfp8\n")
    script, marker = tmp_path / "train.py", tmp_path / "ran"
    script.write_text(MARKER_SCRIPT)
    result = run_accel("launch", "--config_file", str(config), str(script), str(marker))
    assert result.returncode == 2
    assert one_error_line(result) == (
        "accel launch: mixed_precision 'fp8' cannot run on cpu with this configuration: "
        "FP8RecipeKwargs(scaling='mxfp8') cannot run on the 'native' FP8 backend; it runs scaling 'delayed', "
        "'current'. Backends that run 'mxfp8': 'ao', 'te' (docs/fp8-backends.md, 'Where each recipe runs'). "
        "Change the config file (`accel config`) or the flags; nothing was started."
    )
    assert not marker.exists()


def test_a_flag_is_checked_with_the_config(run_accel, tmp_path: Path, one_error_line) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mixed_precision: fp8\nfp8_config:\n  backend: ao\n")
    script, marker = tmp_path / "train.py", tmp_path / "ran"
    script.write_text(MARKER_SCRIPT)
    result = run_accel("launch", "--config_file", str(config), "--fp8_scaling", "delayed", str(script), str(marker))
    assert result.returncode == 2
    assert "FP8RecipeKwargs(scaling='delayed') cannot run on the 'ao' FP8 backend" in one_error_line(result)
    assert not marker.exists()


def test_accel_test_refuses_in_one_line(run_accel, one_error_line) -> None:
    result = run_accel("test", "--mixed_precision", "fp8", "--fp8_backend", "te")
    assert result.returncode == 2
    assert result.stdout == ""  # the check script never started
    assert one_error_line(result).startswith("accel test: mixed_precision 'fp8' cannot run on cpu with this "
                                             "configuration: FP8RecipeKwargs(backend='te') cannot run here")
