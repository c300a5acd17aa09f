"""How a DataLoader is split between processes, checked in this process for many sizes (the
processes' views are computed one after another with each one's ProcessState)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from accel.data.loader import PreparedDataLoader
from accel.data.sharding import BatchSamplerShard
from accel.distributed.process_state import ProcessState
from accel.training.gradient_state import GradientState

CPU = torch.device("cpu")


def views(size: int, processes: int, batch: int, drop_last: bool) -> list[BatchSamplerShard]:
    batches = BatchSampler(SequentialSampler(range(size)), batch, drop_last)
    return [BatchSamplerShard(batches, processes, rank) for rank in range(processes)]


@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("batch", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_process_takes_the_same_steps_and_together_they_see_one_big_batch(
    processes: int, batch: int, drop_last: bool
) -> None:
    for size in range(0, 14):
        shards = views(size, processes, batch, drop_last)
        batches = [list(shard) for shard in shards]
        assert all(len(b) == len(shards[0]) for b in batches)  # DDP needs equal step counts
        for step in range(len(shards[0])):
            assert len({len(b[step]) for b in batches}) == 1  # equal sizes within a step
            gathered = [i for b in batches for i in b[step]]
            keep = size % (batch * processes) if step == len(shards[0]) - 1 and not drop_last else 0
            real = gathered[:keep] if keep else gathered  # what gather_for_metrics keeps (the loader's remainder)
            start = step * batch * processes
            assert real == list(range(start, min(start + batch * processes, size)))
        if not drop_last:
            seen = {i for b in batches for step in b for i in step}
            assert seen == set(range(size))


def test_one_process_keeps_the_users_loader() -> None:
    loader = DataLoader(TensorDataset(torch.arange(5)), batch_size=2)
    prepared = PreparedDataLoader(loader, CPU, GradientState(1), place=True, state=ProcessState(CPU))
    assert prepared.loader is loader
