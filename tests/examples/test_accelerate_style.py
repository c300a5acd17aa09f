"""examples/accelerate_style.py, a typical Accelerate script with only its import lines changed,
trains in one and in two processes, resumes exactly (with --use_stateful_dataloader) or as
Accelerate does (without), and writes TensorBoard scalars.

Each run is a real process (two: `accel launch --num_processes 2`); the runs are shared by the
tests through module-scoped fixtures, since each costs seconds. The script is also run by
Accelerate itself (its imports changed back), which must give the same numbers in one process.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "accelerate_style.py"
EPOCH_LINE = re.compile(r"^epoch (\d+): (\{.*\})$", re.MULTILINE)
EVAL_SAMPLES = 200
BATCHES_PER_EPOCH = {1: 30, 2: 15}  # 480 samples, batches of 16, per process
MID_WINDOW_STEP = {1: 35, 2: 20}  # epoch 1, batch 5: in the middle of a window of 2 accumulated batches


@dataclass(frozen=True)
class Run:
    """A finished run of the script: its folder, what it printed, and the metrics of each epoch."""

    output_dir: Path
    stdout: str
    stderr: str
    metrics: dict[int, dict[str, float]]

    def weights(self) -> dict[str, torch.Tensor]:
        return load_file(self.output_dir / "model" / "model.safetensors")


def _environment() -> dict[str, str]:
    """This environment without launch variables from the developer's shell (or a surrounding launch)."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_", "TORCHELASTIC_")) and k not in names}
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_script(output_dir: Path, *args: str, processes: int = 1, script: Path = SCRIPT) -> Run:
    """Run the script (on the CPU) with `args`, in one process or under `accel launch`; it must succeed."""
    command = [sys.executable, str(script), "--cpu", "--output_dir", str(output_dir), *args]
    if processes > 1:
        command[1:1] = ["-m", "accel", "launch", "--num_processes", str(processes), "--cpu"]
    done = subprocess.run(command, check=False, env=_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr[-5000:]}"
    metrics = {int(epoch): ast.literal_eval(values) for epoch, values in EPOCH_LINE.findall(done.stdout)}
    return Run(output_dir, done.stdout, done.stderr, metrics)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Three epochs in one process, tracked, with a checkpoint every 35 batches."""
    folder = tmp_path_factory.mktemp("one_process")
    return run_script(folder, "--with_tracking", "--checkpointing_steps", str(MID_WINDOW_STEP[1]))


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Three epochs in two processes, tracked, with a checkpoint every 20 batches (of each process)."""
    folder = tmp_path_factory.mktemp("two_processes")
    return run_script(folder, "--with_tracking", "--checkpointing_steps", str(MID_WINDOW_STEP[2]), processes=2)


def _check_training(run: Run) -> None:
    """Every epoch printed once, evaluated on every sample exactly once, and learning."""
    assert len(EPOCH_LINE.findall(run.stdout)) == 3, run.stdout  # accelerator.print: the main process only
    assert sorted(run.metrics) == [0, 1, 2]
    assert [m["eval_samples"] for m in run.metrics.values()] == [EVAL_SAMPLES] * 3
    assert run.metrics[2]["eval_loss"] < run.metrics[0]["eval_loss"] - 0.2
    assert run.metrics[2]["accuracy"] > 0.8  # four classes: chance is 0.25
    assert set(run.weights()) == {"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"}


def test_one_process_trains_and_evaluates_every_sample(one_process: Run) -> None:
    _check_training(one_process)
    epochs = 3 * BATCHES_PER_EPOCH[1]
    expected = [f"step_{n}" for n in range(MID_WINDOW_STEP[1], epochs + 1, MID_WINDOW_STEP[1])]
    assert sorted(p.name for p in one_process.output_dir.glob("step_*")) == expected


def test_two_processes_train_and_gather_each_sample_once(two_processes: Run) -> None:
    """200 evaluation samples in batches of 32 over 2 processes: the last batch is padded, and
    gather_for_metrics drops the padding, so every epoch counts exactly 200."""
    _check_training(two_processes)
    assert sorted(p.name for p in two_processes.output_dir.glob("step_*")) == ["step_20", "step_40"]
    assert (two_processes.output_dir / "step_20" / "random_states_1.pt").is_file()  # each process saved its own


def _resumed(original: Run, checkpoint: str, folder: Path, processes: int, stateful: bool = True) -> Run:
    """A run resumed from `original`'s checkpoint: exact (`stateful`: --use_stateful_dataloader, the loader
    put back where it stopped), or with the loader left as prepared, as under Accelerate."""
    options = ("--use_stateful_dataloader",) if stateful else ()
    resumed = run_script(folder, "--resume_from_checkpoint", str(original.output_dir / checkpoint), *options,
                         processes=processes)
    assert f"Resumed from checkpoint: {original.output_dir / checkpoint}" in resumed.stdout
    return resumed


def test_resuming_mid_epoch_and_mid_window_matches_the_uninterrupted_run_bit_for_bit(
    one_process: Run, tmp_path: Path
) -> None:
    """load_state with use_stateful_dataloader=True: the same metrics and identical weights as the run
    that never stopped. step_35 is epoch 1, batch 5 of 30: in the middle of a
    window of 2 accumulated batches, whose partial gradients the checkpoint holds."""
    resumed = _resumed(one_process, "step_35", tmp_path, processes=1)
    assert sorted(resumed.metrics) == [1, 2]
    assert resumed.metrics == {epoch: one_process.metrics[epoch] for epoch in (1, 2)}
    original_weights, resumed_weights = one_process.weights(), resumed.weights()
    assert all(torch.equal(original_weights[name], resumed_weights[name]) for name in original_weights)


def test_two_processes_resuming_inside_an_accumulation_window_continues_it(two_processes: Run, tmp_path: Path) -> None:
    """step_20 is epoch 1, batch 5 of 15: one micro-batch into a window of 2, whose gradients are not yet
    all-reduced. accel saves the processes' mean of them, which continues the window exactly in arithmetic
    (mean(a) + mean(b) = mean(a + b)) but rounds differently, so equal to float32 precision only."""
    resumed = _resumed(two_processes, "step_20", tmp_path, processes=2)
    assert sorted(resumed.metrics) == [1, 2]
    for epoch in (1, 2):
        assert resumed.metrics[epoch]["accuracy"] == two_processes.metrics[epoch]["accuracy"]
        assert resumed.metrics[epoch]["eval_loss"] == pytest.approx(two_processes.metrics[epoch]["eval_loss"], rel=1e-5)
    original_weights, resumed_weights = two_processes.weights(), resumed.weights()
    for name, weight in original_weights.items():
        torch.testing.assert_close(resumed_weights[name], weight, rtol=1e-5, atol=1e-6)


def test_resuming_from_an_epoch_checkpoint_matches_the_uninterrupted_run(one_process: Run, tmp_path: Path) -> None:
    full = run_script(tmp_path / "full", "--checkpointing_steps", "epoch")
    assert full.metrics == one_process.metrics  # checkpointing does not change the training
    resumed = _resumed(full, "epoch_0", tmp_path / "resumed", processes=1)
    assert resumed.metrics == {epoch: full.metrics[epoch] for epoch in (1, 2)}
    full_weights, resumed_weights = full.weights(), resumed.weights()
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)


def _scalars(run: Run) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run's TensorBoard event files, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = run.output_dir / "logs" / "accelerate_style"
    assert list(folder.glob("events.out.tfevents.*")), f"no event file in {folder}"
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


@pytest.mark.parametrize("processes", [1, 2])
def test_tensorboard_holds_the_logged_scalars(processes: int, one_process: Run, two_processes: Run) -> None:
    """Each epoch's metrics, at step = epoch, as printed (stored as float32); written by one process only."""
    pytest.importorskip("tensorboard")
    run = one_process if processes == 1 else two_processes
    scalars = _scalars(run)
    assert {"accuracy", "eval_loss", "eval_samples", "train_loss", "epoch"} <= set(scalars)
    for name in ("accuracy", "eval_loss", "eval_samples"):
        assert [step for step, _ in scalars[name]] == [0, 1, 2]
        assert [value for _, value in scalars[name]] == pytest.approx(
            [run.metrics[epoch][name] for epoch in range(3)], rel=1e-6
        )
    assert [value for _, value in scalars["epoch"]] == [0.0, 1.0, 2.0]
    train_loss = [value for _, value in scalars["train_loss"]]
    assert train_loss[2] < train_loss[0]
    assert len(list((run.output_dir / "logs" / "accelerate_style").glob("events.out.tfevents.*"))) == 1
    hparams = list((run.output_dir / "logs" / "accelerate_style").glob("*/hparams.yml"))
    assert len(hparams) == 1 and "gradient_accumulation_steps: 2" in hparams[0].read_text()


def test_accelerate_itself_runs_the_script_with_its_imports_changed_back(one_process: Run, tmp_path: Path) -> None:
    """The script is written for Accelerate: with `accelerate` in its two import lines, Accelerate
    runs it, and in one process on the CPU computes the very same metrics and weights as accel, also
    when resumed mid-epoch (by default, without use_stateful_dataloader)."""
    source = SCRIPT.read_text()
    changed = source.replace("\nfrom accel import ", "\nfrom accelerate import ").replace(
        "\nfrom accel.utils import ", "\nfrom accelerate.utils import "
    )
    assert changed.count("from accelerate") == 2 and not re.search(r"^(from|import) accel\b", changed, re.MULTILINE)
    script = tmp_path / "accelerate_style.py"
    script.write_text(changed)
    run = run_script(tmp_path / "out", "--checkpointing_steps", str(MID_WINDOW_STEP[1]), script=script)
    assert run.metrics == one_process.metrics
    accel_weights, accelerate_weights = one_process.weights(), run.weights()
    assert all(torch.equal(accel_weights[name], accelerate_weights[name]) for name in accel_weights)
    # Resumed mid-epoch by default (load_state, then skip_first_batches): accel's loader is left as prepared,
    # as Accelerate's, so both draw the same fresh order and train the same batches. step_70 is epoch 2,
    # batch 10: at a window boundary (inside one, accel also restores the gradients accumulated so far,
    # which Accelerate's checkpoints do not hold).
    step = 2 * MID_WINDOW_STEP[1]
    theirs = run_script(tmp_path / "theirs", "--resume_from_checkpoint", str(run.output_dir / f"step_{step}"),
                        script=script)
    ours = _resumed(one_process, f"step_{step}", tmp_path / "ours", 1, stateful=False)
    assert sorted(ours.metrics) == [2] and ours.metrics == theirs.metrics
    assert ours.metrics[2] != one_process.metrics[2]  # not the uninterrupted run's batches: a fresh order
    ours_weights, theirs_weights = ours.weights(), theirs.weights()
    assert all(torch.equal(ours_weights[name], theirs_weights[name]) for name in ours_weights)
