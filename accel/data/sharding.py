"""Splitting a DataLoader between processes, batch for batch as Accelerate splits it.

The user's DataLoader is rebuilt around a `BatchSamplerShard` (Accelerate's class, same arguments,
batches and len) over its batch sampler, keeping the dataset, collate_fn, workers and generator.
Every process iterates the whole batch sampler and keeps its own batches:

* Batches r, r + W, r + 2W, ... go to process r (W processes), as long as every process of the
  round gets a full batch. With `split_batches` every batch is cut into W parts instead, process r
  taking part r.
* The end of the epoch, unless the batch sampler drops its short last batch (`drop_last`):
  with `even_batches` (the default) the round is completed with samples from the start of the
  epoch (the first W batches, repeated as needed), in full batches, so that every process takes
  the same number of steps of the same size (DDP needs that); with `split_batches` the short
  batch is completed from the first batch. With `even_batches=False` nothing is repeated: the
  processes left take what is there, and may take one batch fewer than the others.
* `len()` is this process's number of batches.

As Accelerate, a shuffling sampler without a generator is given one when the loader is prepared,
seeded from torch's global RNG, and each epoch the generator's state is taken from process 0, so
that every process draws the same order (the shards are disjoint even when the processes' RNGs
differ). A DistributedSampler the script made itself is kept as it is (its epoch is set at each
epoch; Accelerate would split its part again). With batch_size=None the sampler's items are dealt
out as batches. An IterableDataset is split by iterable_sharding.py or dispatching.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader
from torch.utils.data.distributed import DistributedSampler

from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader_options import loader_options
from accel.data.skipping import skipping_loader
from accel.distributed import operations
from accel.distributed.operations import Keep
from accel.distributed.process_state import ProcessState


class Sharding:
    """How a prepared loader is split; this base class is the unsplit loader (one process)."""

    dispatches = False
    """True: process 0 reads the loader and sends each process its part (dispatching.py)."""

    def start_epoch(self, epoch: int) -> None:
        """Called as each epoch starts, with its number."""

    def open(self, loader: DataLoader[Any], skip: int) -> Iterator[Any]:
        """An iterator over this process's batches of an epoch of `loader` (its rebuilt one), from batch `skip`
        on (the skipped batches' samples are not loaded)."""
        return iter(skipping_loader(loader, skip) if skip else loader)

    def length(self, loader: DataLoader[Any]) -> int:
        """This process's batches in an epoch (TypeError when unknown)."""
        return len(loader)

    def ending_remainder(self, remainder: int) -> int:
        """The loader's `remainder` while the epoch's last batch is in use, given the one it started with."""
        return remainder

    def keep(self, batches: int, remainder: int) -> Keep:
        """For the epoch's last batch (the `batches`-th): the rows of its gather that gather_for_metrics keeps.
        Accelerate's rule: the first `remainder` (the loader's), all when it is 0 or -1."""
        return remainder if remainder > 0 else None

    @contextlib.contextmanager
    def override_even_batches(self, even_batches: bool) -> Iterator[None]:
        """Inside the block, split as with `even_batches` (Accelerate's join_uneven_inputs(even_batches=...))."""
        if not isinstance(even_batches, bool):
            raise ValueError(f"even_batches={even_batches!r} is not accepted; accepted values: True or False.")
        self._check_even_batches(even_batches)
        before = getattr(self, "even_batches", None)
        if before is None:  # one process: nothing is split or padded
            yield
            return
        self.even_batches = even_batches
        try:
            yield
        finally:
            self.even_batches = before

    def _check_even_batches(self, even_batches: bool) -> None:
        """Raise ValueError when this split cannot follow `even_batches`."""


class BatchSamplerShard(BatchSampler, Sharding):
    """Process `process_index`'s batches of `batch_sampler` (Accelerate's BatchSamplerShard: same
    arguments, same batches, same len; see the module docstring for the rules).

    Every process iterates the whole batch sampler (its generator, when it has one, was taken from
    process 0 as the epoch started, so all draw the same batches) and keeps its own.

    Example: on 2 processes, a batch sampler yielding [0, 1, 2], [3, 4, 5], [6, 7, 8], [9]
    gives process 0 [0, 1, 2], [6, 7, 8] and process 1 [3, 4, 5], [9, 0, 1]."""

    def __init__(self, batch_sampler: Any, num_processes: int = 1, process_index: int = 0,
                 split_batches: bool = False, even_batches: bool = True) -> None:
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)  # type: ignore[assignment]  # None when it has none
        """The batch sampler's sampler, whose generator checkpoints replay."""
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size = getattr(batch_sampler, "batch_size", None)  # type: ignore[assignment]  # None: items are batches
        self.drop_last = getattr(batch_sampler, "drop_last", False)
        if split_batches and (self.batch_size is None or self.batch_size % num_processes):
            raise ValueError(
                f"BatchSamplerShard(split_batches=True): the batch sampler's batch_size={self.batch_size!r} must be a round "
                f"multiple of num_processes={num_processes}. Use such a batch size, or split_batches=False."
            )
        self.synchronize: Callable[[], None] | None = None
        """Set by shard_loader with several real processes: takes the sampler's generator from process 0."""

    @property
    def total_length(self) -> int:
        """Batches of the whole batch sampler."""
        return len(self.batch_sampler)

    def start_epoch(self, epoch: int) -> None:
        if self.synchronize is not None:
            self.synchronize()

    def __len__(self) -> int:
        batches, processes = len(self.batch_sampler), self.num_processes
        if self.split_batches:
            return batches
        full, rest = divmod(batches, processes)
        if rest == 0 or self.drop_last:
            return full
        return full + (1 if self.even_batches or self.process_index < rest else 0)

    def __iter__(self) -> Iterator[Any]:
        return self._split() if self.split_batches else self._deal()

    def _split(self) -> Iterator[list[int]]:
        """split_batches: this process's slice of every full batch; a short last batch is padded from the
        first batch (even_batches) or sliced as it is."""
        part = self.batch_size // self.num_processes
        mine = slice(part * self.process_index, part * (self.process_index + 1))
        first: list[int] = []
        last: list[int] = []
        for index, batch in enumerate(self.batch_sampler):
            first = batch if index == 0 else first
            last = batch
            if len(batch) == self.batch_size:
                yield batch[mine]
        if self.drop_last or not first or len(last) >= self.batch_size:
            return
        if not self.even_batches:
            if len(last) > mine.start:
                yield last[mine]
            return
        start = list(first)
        while len(start) < self.batch_size:
            start += start
        yield (list(last) + start)[mine]

    def _deal(self) -> Iterator[Any]:
        """Batches r, r + W, r + 2W, ... while every process has a full one; then, with even_batches, the
        batches after the last are made from the start of the epoch until every process has one more."""
        processes, rank, size = self.num_processes, self.process_index, self.batch_size
        start: list[Any] = []  # the items of the first `processes` batches (not needed with drop_last)
        mine: Any = None
        index, last = -1, []
        for index, batch in enumerate(self.batch_sampler):
            last = batch
            if not self.drop_last and index < processes:
                start.extend(batch) if size is not None else start.append(batch)
            if index % processes == rank:
                mine = batch
            if index % processes == processes - 1 and (size is None or len(batch) == size):
                yield mine
                mine = None
        if self.drop_last or not start:
            return
        if not self.even_batches:
            if mine:
                yield mine
            return
        if mine and (size is None or len(mine) == size):
            yield mine
        yield from self._pad(start, index, last)

    def _pad(self, start: list[Any], index: int, last: Any) -> Iterator[Any]:
        """The padding batches this process takes after the epoch's last batch (number `index`)."""
        processes, rank, size = self.num_processes, self.process_index, self.batch_size
        while len(start) < (processes * size if size is not None else processes):
            start += start
        batch: list[Any] = list(last) if size is not None and len(last) != size else []
        index += 0 if batch else 1
        taken = 0
        while index % processes or batch:
            if size is None:
                batch, taken = start[taken], taken + 1
            else:
                needed = size - len(batch)
                batch, taken = batch + start[taken : taken + needed], taken + needed
            if index % processes == rank:
                yield batch
            batch, index = [], index + 1

    def _check_even_batches(self, even_batches: bool) -> None:
        """Any batch sampler follows either value (as Accelerate's)."""


class KeptDistributedSampler(Sharding):
    """A DistributedSampler the script built: used as is, its epoch set at each epoch."""

    def __init__(self, sampler: DistributedSampler[Any], batch_size: int, state: ProcessState) -> None:
        if (sampler.num_replicas, sampler.rank) != (state.data_parallel_size, state.data_parallel_index):
            raise ValueError(
                f"the DataLoader's DistributedSampler has num_replicas={sampler.num_replicas}, rank={sampler.rank}, "
                f"but this process reads part {state.data_parallel_index} of {state.data_parallel_size} of the data. Leave "
                "the sampler out "
                "(accel splits the data itself), or build it with these values."
            )
        self.sampler = sampler
        self._batch_size = batch_size
        self._state = state

    def start_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def _check_even_batches(self, even_batches: bool) -> None:
        if not even_batches:
            _check_own_sampler(DataLoaderConfiguration(even_batches=False))

    def keep(self, batches: int, remainder: int) -> Keep:
        """The sampler pads the epoch's index list at its end, and process r takes positions r, r + W, ..."""
        sampler, processes = self.sampler, self._state.data_parallel_size
        total = len(sampler.dataset)  # type: ignore[arg-type]  # a DistributedSampler's dataset has a len
        if sampler.drop_last or sampler.total_size == total:
            return None
        start = (batches - 1) * self._batch_size
        size = min(self._batch_size, sampler.num_samples - start)
        rows = [r * size + j for r in range(processes) for j in range(size) if (start + j) * processes + r < total]
        return rows if len(rows) < processes * size else None


def shard_loader(loader: DataLoader[Any], state: ProcessState, config: DataLoaderConfiguration | None = None,
                 layout: tuple[int, int] | None = None) -> tuple[DataLoader[Any], Sharding]:
    """The loader process `layout[1]` of `layout[0]` iterates (default: this process of this run), and how it is
    split; in one process, `loader` itself. Accelerate's prepare_data_loader for a map-style dataset (an
    IterableDataset's loader is split by accel.data.iterable_sharding, accel.data.loader picks).

    As Accelerate: a shuffling sampler without a generator gets one, seeded from torch's global RNG, so that
    every epoch's order can be taken from process 0 (`synchronize`, run only when `layout` is this run's)."""
    config = config or DataLoaderConfiguration()
    processes, rank = layout if layout is not None else (state.data_parallel_size, state.data_parallel_index)
    if processes == 1:
        return loader, Sharding()
    if isinstance(loader.sampler, DistributedSampler):
        _check_own_sampler(config)
        return loader, KeptDistributedSampler(loader.sampler, loader.batch_size or 1, state)
    sampler_is_batch_sampler = isinstance(loader.sampler, BatchSampler)
    batch_sampler = loader.sampler if sampler_is_batch_sampler or loader.batch_sampler is None else loader.batch_sampler
    _check_shardable(batch_sampler, "sampler" if loader.batch_sampler is None else "batch sampler")
    if config.split_batches:
        _split_size(batch_sampler, processes, sampler_is_batch_sampler or loader.batch_sampler is not None)
    items = loader.batch_sampler is None and not sampler_is_batch_sampler  # the sampler's items are whole batches
    sampler = loader.sampler if items else getattr(batch_sampler, "sampler", None)
    generator = _own_generator(sampler) if not config.use_seedable_sampler else None
    shard = BatchSamplerShard(batch_sampler, processes, rank, config.split_batches, config.even_batches)
    if generator is not None and state.distributed and (processes, rank) == (state.data_parallel_size, state.data_parallel_index):
        def synchronize() -> None:
            generator.set_state(operations.broadcast(generator.get_state(), state, check_shapes=False))

        shard.synchronize = synchronize
    options = loader_options(loader)
    if loader.batch_sampler is None:  # batch_size=None: the sampler's items are the batches
        return DataLoader(loader.dataset, sampler=shard, batch_size=None, **options), shard
    return DataLoader(loader.dataset, batch_sampler=shard, **options), shard


def _own_generator(sampler: Any) -> torch.Generator | None:
    """The sampler's torch.Generator, made (seeded from torch's global RNG, as Accelerate) when it has a
    `generator` attribute set to None; None for a sampler without one."""
    if not hasattr(sampler, "generator"):
        return None
    if sampler.generator is None:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        sampler.generator = torch.Generator().manual_seed(seed)
    generator = sampler.generator
    return generator if isinstance(generator, torch.Generator) else None


def _split_size(batch_sampler: Any, processes: int, batched: bool) -> int:
    """Each process's share of a batch under `split_batches`; raise unless the batch size divides evenly."""
    size = getattr(batch_sampler, "batch_size", None) if batched else None
    if isinstance(size, bool) or not isinstance(size, int):
        raise ValueError(
            f"DataLoaderConfiguration(split_batches=True) splits each batch over the {processes} processes, but this "
            f"DataLoader's batch sampler {type(batch_sampler).__name__} has no int batch_size (it has {size!r}). "
            "Give the batch sampler a batch_size attribute, or use split_batches=False."
        )
    if size % processes:
        raise ValueError(
            f"DataLoaderConfiguration(split_batches=True): the DataLoader's batch_size={size} cannot be split over "
            f"num_processes={processes}: it must be a multiple of {processes}. Use a batch_size such as "
            f"{max(processes, size // processes * processes)} (each process then gets batch_size / {processes}), "
            f"or split_batches=False (each process then gets batches of {size})."
        )
    return size // processes


def _check_own_sampler(config: DataLoaderConfiguration) -> None:
    """A DistributedSampler the script built splits the data itself: split_batches, even_batches=False
    and the seedable sampler cannot change how."""
    asked = {"split_batches": True, "even_batches": False, "use_seedable_sampler": True}
    refused = [f"{name}={value}" for name, value in asked.items() if getattr(config, name) == value]
    if refused:
        raise ValueError(
            f"DataLoaderConfiguration({', '.join(refused)}) cannot apply to this DataLoader: its DistributedSampler "
            "splits, pads and shuffles the data itself. Leave the sampler out (accel then splits the data as "
            "configured), or use the default for these options."
        )


def _check_shardable(sampler: Any, what: str) -> None:
    """Refuse a (batch) sampler accel cannot split, saying what to do instead."""
    if not isinstance(sampler, Sized):
        raise TypeError(
            f"prepare: the DataLoader's {what} {type(sampler).__name__} has no len(), so it "
            "cannot be split into equal parts for every process. Give it a __len__."
        )
