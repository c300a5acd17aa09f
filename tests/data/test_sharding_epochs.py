"""N processes of batch B see, in every epoch, exactly what one process of batch N x B sees with
torch's own DataLoader (issue 11, item 3): the same order, and the generator left in the same
state after every step (torch's RandomSampler draws a second, unused permutation when it runs
out, and the next epoch's order depends on it).

The processes' views are computed here one after another, each with its own generator seeded
alike (as separate processes would have); the broadcast of process 0's generator state is then
the identity. Real two-process runs are in distributed/test_sampler_epochs.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from accel.data import sharding
from accel.data.loader import PreparedDataLoader
from accel.distributed.process_state import ProcessState
from accel.training.gradient_state import GradientState

CPU = torch.device("cpu")
EPOCHS = 4


@pytest.fixture(autouse=True)
def _one_process_plays_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every simulated process starts from the same generator state, so process 0's broadcast changes nothing."""
    monkeypatch.setattr(sharding.operations, "broadcast", lambda data, state, from_process=0, check_shapes=True: data)


def _loader(size: int, batch: int, generator: bool, drop_last: bool, reference: bool = False) -> DataLoader[Any]:
    """With `generator` False, the reference is given the generator prepare makes (seeded from the global RNG)."""
    data = list(range(size))
    if generator or not reference:
        options: dict[str, Any] = {"generator": torch.Generator().manual_seed(11)} if generator else {}
        return DataLoader(data, batch_size=batch, shuffle=True, drop_last=drop_last, **options)
    seed = int(torch.empty((), dtype=torch.int64).random_().item())  # the sampler's alone, as prepare gives it
    return DataLoader(data, batch_size=batch, sampler=RandomSampler(data, generator=torch.Generator().manual_seed(seed)),
                      drop_last=drop_last)


def _steps(loader: DataLoader[Any], epochs: int) -> Iterator[tuple[int, list[int], Any]]:
    """(epoch, batch, the sampler's generator state after taking it) for every step of `epochs` epochs."""
    generator = loader.batch_sampler.sampler.generator  # type: ignore[union-attr]  # a RandomSampler's
    for epoch in range(epochs):
        for batch in loader:
            state = generator.get_state()
            yield epoch, batch.tolist(), state


@pytest.mark.parametrize("generator", [True, False], ids=["own-generator", "global-rng"])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("size", "processes", "batch"), [(12, 2, 3), (13, 2, 3), (10, 3, 2), (5, 2, 4)])
def test_every_epoch_matches_one_process_with_n_times_the_batch(
    generator: bool, drop_last: bool, size: int, processes: int, batch: int
) -> None:
    torch.manual_seed(3)
    reference = list(_steps(_loader(size, processes * batch, generator, drop_last, reference=True), EPOCHS))
    views = []
    for rank in range(processes):
        torch.manual_seed(3)
        state = ProcessState(CPU, rank, rank, processes, processes)
        prepared = PreparedDataLoader(_loader(size, batch, generator, drop_last), CPU, GradientState(1), False, state)
        views.append(list(_steps(prepared.loader, EPOCHS)))  # the rebuilt loader: no look-ahead, as torch's
    assert all(len(view) == len(reference) for view in views)
    for step, (epoch, big, state) in enumerate(reference):
        parts = [view[step] for view in views]
        assert all(part[0] == epoch for part in parts)
        together = [i for part in parts for i in part[1]]
        assert together[: len(big)] == big, f"epoch {epoch}, step {step}"
        assert set(together[len(big):]) <= set(range(size))  # padding of a short last step only
        for part in parts:  # the generator (or global RNG) advanced exactly as torch's own loader's
            assert torch.equal(part[2], state), f"RNG state differs after epoch {epoch}, step {step}"
