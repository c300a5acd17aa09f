"""Training N micro-batches, saving, and continuing in a new process gives bit-identical
parameters to training without stopping, in every precision that can run here.

The save falls in the middle of an epoch of a shuffling DataLoader and in the middle of a
gradient-accumulation window. A precision added later (FP8) joins the list by itself once
`Accelerator(mixed_precision=...)` can be built with it here.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from accel import Accelerator
from accel.backends.names import CANONICAL_PRECISIONS
from checkpoint_processes import ForkServer, run_fresh
from checkpoint_scenario import ACCUMULATION, BATCH, SAMPLES, Job

STOP = 21
"""Epoch 2, batch 5 of 8; position 2 in a window of 3: mid-epoch and mid-window."""
UNTIL = 40


def _runnable_precisions() -> tuple[list[str], dict[str, str]]:
    runnable, skipped = [], {}
    for precision in CANONICAL_PRECISIONS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                Accelerator(mixed_precision=precision)
        except (NotImplementedError, ImportError, RuntimeError, ValueError) as exc:
            skipped[precision] = str(exc).splitlines()[0]
        else:
            runnable.append(precision)
    return runnable, skipped


def test_the_save_falls_mid_epoch_and_mid_window() -> None:
    batches_per_epoch = -(-SAMPLES // BATCH)
    position_in_epoch = STOP % batches_per_epoch
    assert 0 < position_in_epoch < batches_per_epoch - 1
    assert position_in_epoch % ACCUMULATION != 0


@pytest.fixture(scope="module")
def runs(fork_server: ForkServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Every runnable precision trained straight through and with a stop at STOP; the first
    halves and the straight runs in one process, the second halves in a new interpreter."""
    folder = tmp_path_factory.mktemp("resume")
    precisions, skipped = _runnable_precisions()
    first, second = [], []
    for precision in precisions:
        base = Job(precision=precision, until=UNTIL)
        here = folder / precision
        first.append(dataclasses.replace(base, project_dir=str(here / "straight"), result=str(here / "straight.st")))
        first.append(dataclasses.replace(base, project_dir=str(here / "resumed"), stop_at=STOP))
        resumed = dataclasses.replace(base, project_dir=str(here / "resumed"), resume=True)
        second.append(dataclasses.replace(resumed, result=str(here / "resumed.st")))
    outcome = fork_server.start([dataclasses.asdict(job) for job in first], log=folder / "first.log")
    assert (outcome["outcome"], outcome["code"]) == ("exited", 0), (folder / "first.log").read_text()
    run_fresh([dataclasses.asdict(job) for job in second])
    return folder, skipped


@pytest.mark.parametrize("precision", CANONICAL_PRECISIONS)
def test_resuming_in_a_new_process_is_bit_identical(runs: tuple[Path, dict[str, str]], precision: str) -> None:
    folder, skipped = runs
    assert precision not in skipped, f"mixed_precision={precision!r} must run on every machine: {skipped.get(precision)}"
    straight = load_file(folder / precision / "straight.st")
    resumed = load_file(folder / precision / "resumed.st")
    assert straight.keys() == resumed.keys()
    for name, value in straight.items():
        assert torch.isfinite(value).all(), f"{name}: the run itself diverged"
        assert torch.equal(value, resumed[name]), f"{name} differs after resuming"


def test_fp32_and_fp16_can_run_here(runs: tuple[Path, dict[str, str]]) -> None:
    assert not {"no", "fp16"} & set(runs[1]), runs[1]
