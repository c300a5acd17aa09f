"""A schedule sized before `prepare` runs as under Accelerate on 2 real processes: a LambdaLR decaying to zero
over len(train_dataloader) (64 samples, batch 4) ends at lr 0.0 after one epoch, with Accelerate's lr at every
step; with gradient accumulation too. `scheduler_per_optimizer_step=True` counts optimizer steps instead."""

from __future__ import annotations

import sys

import pytest
from launching import Launched, launch

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _lrs(library: str, accumulation: int, *extra: str) -> list[list[float]]:
    launcher = TORCHRUN if library == "accelerate" else None
    run: Launched = launch("scheduler_script.py", library, str(accumulation), *extra, launcher=launcher)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.of("num_processes") == [2, 2]
    lrs: list[list[float]] = run.of("lrs")
    return lrs


@pytest.mark.parametrize("accumulation", [1, 2])
def test_the_schedule_of_two_processes_is_accelerates(accumulation: int) -> None:
    ours, theirs = _lrs("accel", accumulation), _lrs("accelerate", accumulation)
    assert ours == theirs
    assert len(ours[0]) == 8  # each rank: 8 of the 16 batches
    # two scheduler steps per optimizer step: the 8 (or 4) optimizer steps of the epoch cover 16 (or 8) of 16
    assert ours[0][-1] == pytest.approx(0.0 if accumulation == 1 else 0.5, abs=1e-12)


def test_per_optimizer_step_counts_optimizer_steps() -> None:
    lrs = _lrs("accel", 1, "per_step")
    assert lrs[0] == lrs[1] == [1.0 - step / 16 for step in range(1, 9)]
