"""The example script trains for real: run it briefly in each cheap precision and read its summary."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"
SUMMARY = re.compile(r"done: (\d+) steps .* precision (\S+) \| train loss ([\d.]+) -> ([\d.]+)")


def _train(*args: str) -> re.Match[str]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "12", "--batch_size", "4", "--eval_interval", "0", *args],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    match = SUMMARY.search(result.stdout)
    assert match is not None, result.stdout
    return match


@pytest.mark.parametrize("precision", ["no", "fp16", "fp8"])
def test_example_trains_and_reports_the_precision(precision: str, tmp_path: Path) -> None:
    steps, ran, first, last = _train("--mixed_precision", precision, "--output_dir", str(tmp_path)).groups()
    assert (int(steps), ran) == (12, precision)
    assert float(last) < float(first) - 0.5
    assert "lm_head.weight" in load_file(tmp_path / "model.safetensors")
