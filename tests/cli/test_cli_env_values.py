"""`accel launch` refuses an ACCEL_* setting variable in its environment that does not parse."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any


def test_launch_refuses_num_processes_that_is_not_a_number(
    run_accel: Callable[..., CompletedProcess[str]], show_env_script: Path, one_error_line: Callable[[Any], str]
) -> None:
    result = run_accel("launch", str(show_env_script), extra_env={"ACCEL_NUM_PROCESSES": "abc"})
    assert result.returncode == 2
    line = one_error_line(result)
    assert line.startswith("accel launch: ") and "ACCEL_NUM_PROCESSES='abc' is not an integer" in line
    assert result.stdout == ""
