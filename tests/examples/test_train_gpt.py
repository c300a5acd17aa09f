"""The example script trains for real: run it briefly in each cheap precision and read its summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"
SUMMARY = re.compile(r"done: (\d+) steps .* precision (\S+) \| train loss ([\d.]+) -> ([\d.]+)")


def _train(*args: str, cwd: Path | None = None) -> re.Match[str]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "12", "--batch_size", "4", "--eval_interval", "0", "--report_dir", "",
         *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )
    assert result.returncode == 0, result.stderr
    match = SUMMARY.search(result.stdout)
    assert match is not None, result.stdout
    return match


@pytest.mark.parametrize(("precision", "steps", "drop"), [("no", 12, 0.5), ("fp16", 4, 0.0), ("fp8", 4, 0.0)])
def test_example_trains_and_reports_the_precision(precision: str, steps: int, drop: float, tmp_path: Path) -> None:
    """fp16 and fp8 (bf16 base) run few steps: their 16-bit GEMMs are ~100x slower on CPUs without AVX512-BF16/FP16."""
    args = ("--mixed_precision", precision, "--output_dir", str(tmp_path), "--steps", str(steps))
    done_steps, ran, first, last = _train(*args).groups()
    assert (int(done_steps), ran) == (steps, precision)
    assert float(last) < float(first) - drop
    assert "lm_head.weight" in load_file(tmp_path / "model.safetensors")


@pytest.mark.parametrize("precision", ["16-true", "bf16-true", "64-true"])
def test_every_true_precision_trains(precision: str, tmp_path: Path) -> None:
    steps, ran, first, last = _train("--mixed_precision", precision, "--steps", "3", "--batch_size", "2").groups()
    assert (int(steps), ran) == (3, precision)
    assert float(last) < float(first)


def test_the_first_line_says_what_runs_and_the_curve_is_written_from_any_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "4", "--batch_size", "4", "--eval_interval", "2",
         "--mixed_precision", "fp8", "--gradient_accumulation_steps", "2", "--report_dir", "report"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("running: fp8 (native, delayed scaling, base bf16) | 1 process(es) | ")
    assert "gradient accumulation 2" in first and "thread(s) per process" in first
    rows = (tmp_path / "report" / "loss.csv").read_text().splitlines()
    assert rows[0] == "step,split,loss"
    assert [row.split(",")[:2] for row in rows[1:]] == [
        ["0", "val"], ["1", "train"], ["2", "train"], ["2", "val"], ["3", "train"], ["4", "train"], ["4", "val"]
    ]
    png = (tmp_path / "report" / "loss.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_the_readme_command_installs_what_the_loss_plot_needs() -> None:
    """The README's first command installs matplotlib (through an extra), so it writes loss.png as the README says."""
    import shlex

    tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11

    readme = (SCRIPT.parents[1] / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.endswith("python examples/train_gpt.py"))
    target = next(word for word in shlex.split(command) if word.startswith(".["))
    extras = target.removeprefix(".[").removesuffix("]").split(",")
    with (SCRIPT.parents[1] / "pyproject.toml").open("rb") as file:
        optional = tomllib.load(file)["project"]["optional-dependencies"]
    required = "\n".join(requirement for extra in extras for requirement in optional[extra])
    assert "matplotlib" in required and "loss.png" in readme


def test_without_matplotlib_the_example_says_the_plot_is_not_written(tmp_path: Path) -> None:
    hide = ("import runpy, sys; sys.modules['matplotlib'] = None; "
            f"sys.argv = [{str(SCRIPT)!r}, '--steps', '2', '--batch_size', '2', '--eval_interval', '0', "
            "'--report_dir', 'report']; runpy.run_path(sys.argv[0], run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "loss.png not written: matplotlib is not installed" in result.stdout
    assert (tmp_path / "report" / "loss.csv").exists() and not (tmp_path / "report" / "loss.png").exists()


def test_a_busy_machine_gets_one_hint_with_what_to_try(tmp_path: Path) -> None:
    """Two torch threads pinned to one core get at most half the CPU time they could use: the example says so, once."""
    command = ["taskset", "-c", "0", sys.executable, str(SCRIPT), "--steps", "8", "--batch_size", "4",
               "--eval_interval", "0", "--report_dir", ""]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert result.returncode == 0, result.stderr
    hints = [line for line in result.stdout.splitlines() if "of the CPU time its 2 thread(s) could use" in line]
    assert len(hints) == 1 and "OMP_NUM_THREADS=1" in hints[0], result.stdout


def test_the_contention_hint_needs_a_low_share() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from train_gpt import contention_hint

    assert contention_hint(cpu_seconds=3.9, wall_seconds=2.0, threads=2) is None
    assert "25% of the CPU time its 2 thread(s)" in (contention_hint(cpu_seconds=1.0, wall_seconds=2.0, threads=2) or "")
    assert "fewer processes" in (contention_hint(cpu_seconds=0.2, wall_seconds=1.0, threads=1) or "")


def test_the_progress_line_shows_the_rates_of_one_named_window() -> None:
    """ThroughputKwargs' first window ends at step 11 (the first step is not timed): step 12's line shows it, steps
    2-11, with steps/s, tok/s and MFU all from that window (tok/s is steps/s times the tokens of a step)."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "12", "--batch_size", "2", "--eval_interval", "0", "--report_dir", "",
         "--log_interval", "6"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("step ") and "/12 | loss" in line]
    assert "steps/s" not in lines[0] and "tok/s" not in lines[0]  # step 6: no window has ended yet
    match = re.search(r"step 12/12 \| loss [\d.]+ \| steps 2-11: ([\d.]+) steps/s, ([\d,]+) tok/s, MFU ([\d.]+)% \| no$",
                      lines[1])
    assert match is not None, lines
    steps_per_s, tokens_per_s, mfu = float(match[1]), float(match[2].replace(",", "")), float(match[3])
    tokens_per_step = 2 * 64  # --batch_size 2, the GPT's block_size 64
    # steps/s is printed to 0.005 and tok/s to 0.5: tok/s over steps/s is a step's tokens within both roundings (a
    # slow run, 1.10 steps/s and 140 tok/s, is 0.45% and 0.36% off: 127.27)
    rounding = 0.005 / steps_per_s + 0.5 / tokens_per_s + 1e-3
    assert tokens_per_s / steps_per_s == pytest.approx(tokens_per_step, rel=rounding)
    assert 0 < mfu <= 100


def test_the_progress_line_says_when_mfu_is_unknown() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    from train_gpt import throughput_text

    numbers = {"throughput/step_time_s": 0.25, "throughput/tokens_per_s": 512.0, "throughput/tflops_per_device": 1.0}
    assert throughput_text(numbers, (12, 21)) == " | steps 12-21: 4.00 steps/s, 512 tok/s, MFU unknown"
    assert throughput_text({}, None) == ""
