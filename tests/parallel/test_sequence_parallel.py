"""Sequence parallelism (Ulysses, sp_backend "torch") on real CPU processes: a tiny transformers Llama trained on
sequences split over the sp ranks gives the losses of one process on the whole sequences (fp32, 1e-5)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed" / "two_processes"))
from launching import Launched, launch  # noqa: E402

HERE = Path(__file__).parent
STEPS = 20


def _run(sp_size: int, dp_shard: int, dp_replicate: int, processes: int) -> Launched:
    done = launch(str(HERE / "sequence_script.py"), str(sp_size), str(dp_shard), str(dp_replicate), str(STEPS),
                  processes=processes, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def reference() -> list[float]:
    """One process, whole sequences."""
    return _run(1, 1, 1, 1).of("losses")[0]


@pytest.mark.parametrize(("sp_size", "dp_shard", "dp_replicate", "processes"), [(2, 1, 1, 2), (2, 2, 1, 4), (2, 1, 2, 4)],
                         ids=["sp2", "sp2-fsdp2", "sp2-ddp2"])
def test_the_split_sequence_trains_as_one_process(reference: list[float], sp_size: int, dp_shard: int,
                                                  dp_replicate: int, processes: int) -> None:
    """20 SGD steps: every rank's loss (the data-parallel mean) is one process's within 1e-5; each rank got half
    of every (padded) row, with the targets and positions of the whole sequence."""
    done = _run(sp_size, dp_shard, dp_replicate, processes)
    assert len(reference) == STEPS
    for losses in done.of("losses"):
        assert losses == pytest.approx(reference, rel=1e-5)
    places = processes // sp_size
    assert done.of("shapes")[0] == [[4 // places, 16]]  # 31 positions padded to 32, half on each sp rank
    assert done.of("keys")[0] == ["input_ids", "position_ids", "shift_labels"]


def test_each_slices_logits_are_the_whole_sequences_at_its_positions() -> None:
    """The forward alone: each rank's logits equal one process's at the rank's positions, and the loss of the split
    sequence is the whole sequence's (0.0 apart on this machine's Xeon; other CPUs may block the matmuls of the
    shorter slices differently, hence the float tolerance)."""
    done = launch(str(HERE / "sequence_logits_script.py"), processes=2, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert max(done.of("logits_difference")) <= 1e-5
    for split, whole in done.of("losses"):
        assert split == pytest.approx(whole, rel=1e-6)
