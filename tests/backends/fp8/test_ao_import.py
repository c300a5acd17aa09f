"""torchao imports without its start-up noise (failed GPU-kernel libraries, Enum deprecations), and nothing else is hidden."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from accel.backends.fp8.ao_import import _StartUpNoise

pytest.importorskip("torchao")

SCRIPT = """
import torch
from accel import Accelerator
from accel.utils import FP8RecipeKwargs
accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="ao")])
model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(32, 32)))
print(accelerator.precision.describe())
"""


def test_an_ao_run_prints_no_torchao_start_up_noise() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("fp8 (ao")
    assert "Failed to load" not in result.stderr and "Enum subclass" not in result.stderr, result.stderr


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("torchao", logging.WARNING, __file__, 1, message, None, None)


def test_only_the_two_kinds_of_start_up_line_are_held_back() -> None:
    noise = _StartUpNoise()
    assert not noise.filter(_record("Failed to load /x/torchao/_C_mxfp8.so: Could not load this library"))
    assert not noise.filter(_record("<enum 'KernelPreference'> is an Enum subclass and is now natively supported by "
                                    "torch.compile as an opaque value type."))
    assert noise.filter(_record("Failed to convert layer fc1"))
    assert noise.filter(_record("torchao 0.15 needs torch >= 2.9"))
