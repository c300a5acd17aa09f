"""Shared fixtures for the command-line tests: an isolated config location and a way to run `accel`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"

RunAccel = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """This environment without ACCEL_* variables, with the default config location inside tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    env.pop("OMP_NUM_THREADS", None)
    return env


@pytest.fixture
def run_accel(clean_env: dict[str, str], tmp_path: Path) -> RunAccel:
    """Run `python -m accel ARGS` in tmp_path with the clean environment (plus `extra_env`)."""

    def run(*args: str, extra_env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "accel", *args], cwd=tmp_path, env={**clean_env, **(extra_env or {})},
            capture_output=True, text=True, timeout=timeout,
        )

    return run


@pytest.fixture
def show_env_script(tmp_path: Path) -> Path:
    """A copy of scripts/show_env.py in tmp_path: prints its argv, rank and ACCEL_* environment as JSON."""
    target = tmp_path / "show_env.py"
    target.write_text((SCRIPTS / "show_env.py").read_text())
    return target


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def one_error_line() -> Callable[[subprocess.CompletedProcess[str]], str]:
    """The single line a refused command printed on stderr (asserting there is exactly one, and no traceback)."""
    return _one_error_line
