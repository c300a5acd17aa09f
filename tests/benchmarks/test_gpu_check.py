"""benchmarks/gpu_check.py: a smoke run on this CPU (tiny settings), and the real run on a CUDA GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
TINY = ["--steps", "4", "--n_layer", "1", "--n_embd", "32", "--batch_size", "4", "--block_size", "16"]


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_the_check_runs_on_the_cpu_and_reports_every_row(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    result = run("--device", "cpu", *TINY, "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["name"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["torch._scaled_mm e4m3"]["verdict"] == "ok"
    assert rows["bf16"]["verdict"] == "ok" and rows["bf16"]["final_loss"] > 0
    for name in ("fp8 native O1", "fp8 native O2"):
        assert rows[name]["verdict"] == "ok"
        assert abs(rows[name]["loss_vs_bf16"]) < 0.1 and rows[name]["step_ms"] > 0
    for name, library in (("fp8 te", "TransformerEngine"), ("fp8 msamp O2", "MS-AMP")):
        assert rows[name]["verdict"] == "skipped" and library in rows[name]["detail"]
    assert rows["bf16"]["peak_mib"] is None  # GPU memory only
    table = result.stdout
    assert "final loss" in table and "peak MiB" in table and "all rows that could run passed" in table


def test_a_loss_beyond_the_tolerance_fails_the_check() -> None:
    result = run("--device", "cpu", *TINY, "--variants", "bf16,fp8 native O1", "--tolerance", "0")
    assert result.returncode == 1
    assert "loss off" in result.stdout and "FAILED: fp8 native O1" in result.stdout


def test_bad_arguments_are_refused_with_what_is_accepted() -> None:
    result = run("--variants", "fp8 foo", timeout=60)
    assert result.returncode == 2 and "--variants: 'fp8 foo' unknown; accepted:" in result.stderr
    if not torch.cuda.is_available():
        result = run("--device", "cuda", *TINY, timeout=60)
        assert result.returncode == 1 and "torch sees no CUDA GPU here" in result.stderr


@pytest.mark.fp8_gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none): the real GPU check")
def test_the_check_passes_on_the_gpu(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    result = run("--device", "cuda", "--steps", "100", "--json", str(out), timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["name"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["fp8 native O1"]["verdict"] == "ok" and rows["fp8 native O1"]["peak_mib"] > 0
