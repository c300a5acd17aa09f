"""Each process's batches of a prepared DataLoader are Accelerate's, batch for batch.

Accelerate's and accel's `prepare_data_loader` both take `num_processes` and `process_index`, so one
process can compute every process's part of the data without running several: for a grid of dataset
lengths, batch sizes, process counts and options, both are asked for process r's loader (torch's RNG
seeded the same before each), and their batches over two epochs, `len()`, and the
`end_of_dataloader` / `remainder` of the last batch must be equal. Dispatched batches need real
processes (tests/distributed/two_processes/test_dispatch.py); in one process they are checked here.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import accelerate.data_loader as theirs
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from accel.data.prepare import prepare_data_loader


class Stream(IterableDataset):  # type: ignore[type-arg]
    """0, 1, ..., size - 1 (with a len when `sized`)."""

    def __init__(self, size: int, sized: bool = True) -> None:
        self.size = size
        self.sized = sized

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("no len")
        return self.size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.size))


def run(prepare: Callable[..., Any], make: Callable[[], DataLoader[Any]], epochs: int = 2, **options: Any) -> Any:
    """What a prepared loader yields: len, then per epoch its batches and, at the last batch, (end, remainder)."""
    torch.manual_seed(1234)
    loader = prepare(make(), **options)
    try:
        length: Any = len(loader)
    except TypeError:
        length = None
    seen = []
    for _ in range(epochs):
        batches, ending = [], None
        for batch in loader:
            batches.append(batch.tolist())
            ending = (loader.end_of_dataloader, loader.remainder)
        seen.append((batches, ending))
    return length, seen


def both(make: Callable[[], DataLoader[Any]], **options: Any) -> None:
    ours = run(prepare_data_loader, make, **options)
    reference = run(theirs.prepare_data_loader, make, **options)
    assert ours == reference, f"{options}:\naccel      {ours}\naccelerate {reference}"


LENGTHS = [1, 5, 8, 13]
pytestmark = pytest.mark.filterwarnings("ignore:Length of IterableDataset")  # torch's, for both (Accelerate's len)
SIZES = [1, 3, 4]


@pytest.mark.parametrize("processes", [1, 2, 3])
@pytest.mark.parametrize("split_batches", [False, True])
@pytest.mark.parametrize("even_batches", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_map_style_batches_are_accelerates(processes: int, split_batches: bool, even_batches: bool, drop_last: bool,
                                           shuffle: bool) -> None:
    for length, size in itertools.product(LENGTHS, SIZES):
        if split_batches and size % processes:
            continue
        for rank in range(processes):
            both(partial(DataLoader, range(length), batch_size=size, shuffle=shuffle, drop_last=drop_last),
                 num_processes=processes, process_index=rank, split_batches=split_batches, even_batches=even_batches,
                 dispatch_batches=False)


@pytest.mark.parametrize("data_seed", [None, 7])
def test_the_seedable_sampler_orders_as_accelerates(data_seed: int | None) -> None:
    for processes, length, size in itertools.product([1, 2], [5, 13], [2, 4]):
        for rank in range(processes):
            both(partial(DataLoader, range(length), batch_size=size, shuffle=True), epochs=3, num_processes=processes,
                 process_index=rank, use_seedable_sampler=True, data_seed=data_seed)


@pytest.mark.parametrize("even_batches", [True, False])
def test_a_batch_sampler_given_explicitly_is_split_as_accelerate_splits_it(even_batches: bool) -> None:
    makers = [
        lambda n: DataLoader(range(n), batch_sampler=BatchSampler(SequentialSampler(range(n)), 3, False)),
        lambda n: DataLoader(range(n), batch_sampler=BatchSampler(SequentialSampler(range(n)), 3, True)),
        lambda n: DataLoader(torch.arange(n), sampler=BatchSampler(SequentialSampler(range(n)), 3, False), batch_size=None),
    ]
    for make, processes, length in itertools.product(makers, [2, 3], [1, 4, 7, 10]):
        for rank in range(processes):
            both(partial(make, length), num_processes=processes, process_index=rank, even_batches=even_batches)


@pytest.mark.parametrize("processes", [1, 2, 3])
@pytest.mark.parametrize("split_batches", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("sized", [True, False])
def test_iterable_batches_are_accelerates(processes: int, split_batches: bool, drop_last: bool, sized: bool) -> None:
    for length, size in itertools.product(LENGTHS, SIZES):
        if split_batches and size % processes:
            continue
        for rank in range(processes):
            both(partial(DataLoader, Stream(length, sized), batch_size=size, drop_last=drop_last),
                 num_processes=processes, process_index=rank, split_batches=split_batches, dispatch_batches=False)


@pytest.mark.parametrize("split_batches", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("iterable", [False, True])
def test_one_process_dispatch_is_accelerates(split_batches: bool, drop_last: bool, iterable: bool) -> None:
    for length, size in itertools.product(LENGTHS, SIZES):
        dataset: Any = Stream(length) if iterable else range(length)
        options = {"put_on_device": True, "split_batches": split_batches, "dispatch_batches": None if iterable else True}
        if drop_last and length < size:  # no batch at all: Accelerate's dispatcher raises, accel's yields none
            assert run(prepare_data_loader, partial(DataLoader, dataset, batch_size=size, drop_last=True), **options) \
                == (0, [([], None), ([], None)])
            continue
        both(partial(DataLoader, dataset, batch_size=size, drop_last=drop_last), **options)


def test_dispatch_needs_batches_on_the_device() -> None:
    with pytest.raises(ValueError, match=r"dispatch_batches=True.*put_on_device=False"):
        prepare_data_loader(DataLoader(range(4)), dispatch_batches=True)
    with pytest.raises(ValueError, match="requires `put_on_device=True`"):
        theirs.prepare_data_loader(DataLoader(range(4)), dispatch_batches=True)


@pytest.mark.parametrize("dispatch", [False, True])
def test_a_prepared_loader_pickles(dispatch: bool) -> None:
    for processes, rank in ([1, 0], [3, 2]):
        prepared = prepare_data_loader(DataLoader(range(10), batch_size=3, shuffle=True), num_processes=processes,
                                       process_index=rank if not dispatch else None, put_on_device=True,
                                       dispatch_batches=dispatch)
        copy = pickle.loads(pickle.dumps(prepared))
        assert len(copy) == len(prepared)
        assert sorted(i for batch in copy for i in batch.tolist()) == sorted(i for b in prepared for i in b.tolist())
