"""benchmarks/gpu_check.py: its plan and a smoke run on this CPU (tiny Llama), and the real run on a CUDA GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
SOME = "bf16,native delayed O1,native delayed O2,ao rowwise,te nvfp4"
"""The rows the CPU smoke trains: the reference, native's two levels, a torchao recipe, and one that cannot run here."""


def run(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_the_plan_lists_every_recipe_and_why_it_cannot_run_here() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from gpu_check import RECIPES

    result = run("--cpu_smoke", "--plan", timeout=200)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in result.stdout.splitlines()[1:]}
    assert list(lines) == [r.name for r in RECIPES]
    assert {lines[name] for name in ("bf16", "native delayed O1", "native current O1", "ao rowwise")} == {"runs"}
    assert all("skipped: TransformerEngine" in lines[n] for n in lines if n.startswith("te "))
    assert lines["msamp O2"].startswith("skipped: MS-AMP")


def test_the_cpu_smoke_trains_what_runs_here_and_reports_every_row(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    result = run("--cpu_smoke", "--recipes", SOME, "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["name"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["torch._scaled_mm e4m3"]["verdict"] == "ok"
    assert rows["bf16"]["verdict"] == "ok" and rows["bf16"]["final_loss"] > 0 and rows["bf16"]["tokens_s"] > 0
    for name in ("native delayed O1", "native delayed O2", "ao rowwise"):
        row = rows[name]
        assert row["verdict"] == "ok" and abs(row["loss_vs_bf16"]) < 0.01 and row["vs_bf16"] > 0
        assert row["in_fp8"] == "8 of 8"  # the CPU's small-layer default is off: every Linear of the tiny Llama
        assert row["tokens_s_compiled"] is None  # the smoke runs eager only
    assert rows["te nvfp4"]["verdict"] == "skipped" and "TransformerEngine" in rows["te nvfp4"]["detail"]
    assert rows["bf16"]["peak_gib"] is None  # GPU memory only
    assert "| recipe | backend | verdict | tokens/s | vs bf16 |" in result.stdout
    assert "all rows that could run passed" in result.stdout


def test_a_loss_beyond_the_tolerance_fails_the_check() -> None:
    result = run("--cpu_smoke", "--recipes", "bf16,native delayed O1", "--tolerance", "0")
    assert result.returncode == 1
    assert "loss off" in result.stdout and "FAILED: native delayed O1" in result.stdout


def test_bad_arguments_are_refused_with_what_is_accepted() -> None:
    result = run("--recipes", "fp8 foo", timeout=60)
    assert result.returncode == 2 and "--recipes: 'fp8 foo' unknown; accepted:" in result.stderr
    if not torch.cuda.is_available():
        result = run("--device", "cuda", "--plan", timeout=60)
        assert result.returncode == 1 and "torch sees no CUDA GPU here" in result.stderr


@pytest.mark.fp8_gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none): the real GPU check")
def test_the_check_passes_on_the_gpu(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    result = run("--steps", "30", "--json", str(out), timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["name"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["native delayed O1"]["verdict"] == "ok" and rows["native delayed O1"]["peak_gib"] > 0
    assert rows["bf16"]["tokens_s_compiled"] > 0
