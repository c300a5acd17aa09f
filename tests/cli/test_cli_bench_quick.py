"""`accel bench --quick` for real (eager rows only, few steps, a recommendation marked quick) and the full
run's up-front estimate of its length."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accel.bench.flops import flops_per_token, mfu
from accel.bench.report import counted
from accel.bench.workload import Workload
from accel.cli.bench import COMPILE_GUESS_S, QUICK_STEPS, estimate
from accel.cli.main import main
from accel.monitoring.peaks import measured_cpu_peak

ROOT = Path(__file__).parents[2]


def test_quick_runs_the_example_gpt_eager_only_and_marks_its_recommendation(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "accel", "bench", "--quick", "--precisions", "fp32,bf16,bf16-true", "--no_progress",
         "--output_dir", str(tmp_path)],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    # under a minute on two idle cores; this machine is shared, so only a loose bound
    assert seconds < 600, f"accel bench --quick took {seconds:.0f} s"
    assert f"(a quick run: eager only), {QUICK_STEPS} steps each" in done.stderr
    assert "--quick gives a first look" not in done.stderr
    quick = f"Quick run (eager only, {QUICK_STEPS} steps of batch 2): "
    verdicts = ("Recommended: ", "No precision is clearly faster", "No recommendation: the machine was too busy")
    assert any(quick + verdict in done.stdout for verdict in verdicts), done.stdout
    assert "Run without --quick for the compiled rows" in done.stdout
    with (tmp_path / "bench.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["case"], row["mode"], row["status"]) for row in rows] == [
        ("fp32", "eager", "ran"), ("bf16", "eager", "ran"), ("bf16-true", "eager", "ran"),
    ]
    assert all(len(row["losses"].split()) == QUICK_STEPS for row in rows)
    # MFU: the example GPT's FLOPs per token, counted once, over this CPU's measured fp32 matmul rate
    assert all(0 < float(row["mfu"]) < 2 for row in rows)
    assert " MFU " in done.stdout.splitlines()[2]


def test_the_bench_counts_the_flops_of_one_training_step_per_token() -> None:
    torch.manual_seed(0)
    model = nn.Linear(16, 8)
    batches = [(torch.randn(4, 16), torch.randint(8, (4,)))]
    work = Workload("linear", model, batches, lambda out, target: F.cross_entropy(out, target), tokens_per_step=4)
    # forward 2 and weight gradient 2 per weight and sample (the input needs no gradient)
    assert flops_per_token(work) == 4 * 16 * 8
    assert mfu(4 * 16 * 8, 1000.0, torch.device("cpu"), torch.float32) == pytest.approx(
        4 * 16 * 8 * 1000.0 / measured_cpu_peak()
    )


def test_a_full_run_says_up_front_how_long_it_will_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = tmp_path / "tiny_model.py"
    hook.write_text(
        "import torch\nfrom torch import nn\n\ndef make():\n    model = nn.Linear(4, 3)\n"
        "    return model, lambda step: (torch.randn(2, 4), torch.tensor([0, 2]))\n"
    )
    status = main(["bench", "--model", f"{hook}:make", "--precisions", "fp32", "--no_compile", "--steps", "2",
                   "--warmup", "0", "--no_progress", "--output_dir", str(tmp_path / "out")])
    assert status == 0
    captured = capsys.readouterr()
    err = captured.err
    assert "1 precision x 1 mode (eager), 2 steps each, interleaved; under a minute (from one fp32 step here)" in err
    assert "2 steps per case (step time: median after 0 warm-up steps)" in captured.out
    assert "--quick gives a first look in under a minute" in err


def test_the_estimate_counts_every_row_and_a_compile_per_precision() -> None:
    assert estimate(0.5, 10, ("eager",), 12) == "about 1 minute"
    assert estimate(0.1, 2, ("eager",), 12) == "under a minute"
    assert estimate(0.2, 15, ("eager",), 12) == "about 36 s"
    compiled = 0.5 * 12 * 10 * 2 + COMPILE_GUESS_S * 10
    assert estimate(0.5, 10, ("eager", "compiled"), 12) == f"about {round(compiled / 60)} minutes"


def test_counts_read_in_the_singular_for_one() -> None:
    assert [counted(n, "mode") for n in (0, 1, 2)] == ["0 modes", "1 mode", "2 modes"]
    assert counted(1, "warm-up step") == "1 warm-up step"
