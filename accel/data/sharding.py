"""Splitting a DataLoader between processes: each gets a disjoint part of every epoch.

The user's DataLoader is rebuilt around a batch sampler that hands each process its part, keeping
the dataset, collate_fn, workers, drop_last, shuffling and generator.

Global step s of W processes with per-process batch B covers samples [s*W*B, (s+1)*W*B) of the
epoch's order, process r taking the r-th block of B. Together they see exactly the batch one
process with batch W*B would see, in the same order: training with W processes of batch B
follows training with one process of batch W*B. With `split_batches` the DataLoader's batch size
is that global batch: each process takes batch_size / W of each batch it yields.

A last, short global batch: with `even_batches` (the default) it is split evenly and padded with
samples from the start of the epoch, so that every process takes the same number of steps (DDP
needs that); `gather_for_metrics` drops those duplicates again. With `even_batches=False`
(Accelerate's meaning) process r takes its block of B as it is, or nothing when the block is
empty: processes may then take different numbers of batches, and their last batches may differ
in size.

The epoch's order is drawn exactly as torch's RandomSampler draws it (a seed from the global RNG,
or the sampler's generator), then taken from process 0 on every process: the shards stay
disjoint even when the processes' RNGs differ. As torch's sampler does, a generator also draws a
second, unused permutation when the epoch's indices run out, at the step where one process of
batch W*B would: the next epoch's order depends on it. Other samplers and batch samplers are run
on process 0, and its list of batches is sent to all. A DistributedSampler the script made
itself is kept as it is (its epoch is set at each epoch). A DataLoader with batch_size=None
has its sampler's items dealt out as batches (BatchListShard). An IterableDataset is split by
iterable_sharding.py.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sized
from typing import Any, TypeGuard

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    Sampler,
    SequentialSampler,
)
from torch.utils.data.distributed import DistributedSampler

from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader_options import SeededRandomSampler, loader_options
from accel.distributed import operations
from accel.distributed.operations import Keep
from accel.distributed.process_state import ProcessState


class Sharding:
    """How a prepared loader is split; this base class is the unsplit loader (one process)."""

    def start_epoch(self, epoch: int) -> None:
        """Called as each epoch starts, with its number."""

    def keep(self, batches: int) -> Keep:
        """For the epoch's last batch (the `batches`-th): the rows of its gather that are not padding."""
        return None

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


def _part(block: list[int], rank: int, processes: int, size: int, even: bool, start: list[int]) -> list[int]:
    """Process `rank`'s part of a short global batch `block` (full: `processes` x `size`): with `even`,
    an equal share of it padded from `start` (the epoch's first indices); else its block of `size`."""
    if not even:
        return block[rank * size : (rank + 1) * size]
    size = math.ceil(len(block) / processes)
    padded = block + [start[i % len(start)] for i in range(size * processes - len(block))]
    return padded[rank * size : (rank + 1) * size]


class ShardedBatchSampler(Sampler[list[int]], Sharding):
    """This process's block of each global batch, from RandomSampler's or SequentialSampler's order."""

    def __init__(self, sampler: RandomSampler | SequentialSampler, batch_size: int, drop_last: bool,
                 state: ProcessState, even_batches: bool = True) -> None:
        self.sampler = sampler  # its generator is what checkpoints replay
        self.batch_sampler: BatchSampler | None = None
        """The DataLoader's BatchSampler this one replaces (Accelerate's BatchSamplerShard.batch_sampler)."""
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.even_batches = even_batches
        self._state = state
        self._size = len(sampler)
        self._step = batch_size * state.num_processes

    def __len__(self) -> int:
        full, rest = divmod(self._size, self._step)
        if self.drop_last or rest == 0:
            return full
        return full + (1 if self.even_batches or rest > self._state.process_index * self.batch_size else 0)

    def __iter__(self) -> Iterator[list[int]]:
        order, generator = self._order()
        rank, size, step = self._state.process_index, self.batch_size, self._step
        full, rest = divmod(self._size, step)
        for start in range(0, full * step, step):
            yield order[start + rank * size : start + (rank + 1) * size]
        if rest and not self.drop_last:
            self._run_out(generator)  # torch's sampler runs out while it fills the short batch
            part = _part(order[full * step :], rank, self._state.num_processes, size, self.even_batches, order)
            if part:
                yield part
        else:
            self._run_out(generator)  # ... or when asked for the batch after the last

    def keep(self, batches: int) -> Keep:
        rest = self._size % self._step
        return rest if rest and self.even_batches and not self.drop_last else None

    def _order(self) -> tuple[list[int], torch.Generator | None]:
        """The epoch's order, drawn like the sampler draws it, taken from process 0, and the generator
        that drew it when it is the sampler's own (None when the sampler's next draw matters to no one)."""
        if isinstance(self.sampler, SequentialSampler):
            return list(range(self._size)), None
        if isinstance(self.sampler, SeededRandomSampler):
            self.sampler.reseed()
        generator = self.sampler.generator
        if generator is None:
            seed = torch.empty((), dtype=torch.int64).random_().reshape(1)
            local = torch.Generator()
            local.manual_seed(int(operations.broadcast(seed, self._state, check_shapes=False).item()))
            return torch.randperm(self._size, generator=local).tolist(), None
        generator.set_state(operations.broadcast(generator.get_state(), self._state, check_shapes=False))
        return torch.randperm(self._size, generator=generator).tolist(), generator

    def _run_out(self, generator: torch.Generator | None) -> None:
        """What torch's RandomSampler draws when its indices run out: one more, unused, permutation."""
        if generator is not None:
            torch.randperm(self._size, generator=generator)


class BatchListShard(Sampler[list[int]], Sharding):
    """Batches r, r + W, r + 2W, ... of the user's batch sampler, as process 0 draws them; with
    `split_size`, part r (of that size) of every batch instead. With DataLoader(batch_size=None) it
    deals out the sampler's items the same way: lists of indices (a BatchSampler given as `sampler`,
    Accelerate's case) or single indices of a dataset that returns whole batches."""

    def __init__(self, batch_sampler: Sampler[list[int]], state: ProcessState, even_batches: bool = True,
                 split_size: int | None = None, *, sized_items: bool = True) -> None:
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)
        self.even_batches = even_batches
        self._state = state
        self._split = split_size
        self._keep: Keep = None
        self._sized_items = sized_items
        """False: the items are single indices of whole batches (DataLoader(batch_size=None)), rows unknown."""

    def __len__(self) -> int:
        batches, processes = len(self.batch_sampler), self._state.num_processes  # type: ignore[arg-type]  # Sized (checked)
        if self._split is not None:
            return batches
        if self.even_batches:
            return math.ceil(batches / processes)
        return len(range(self._state.process_index, batches, processes))

    def __iter__(self) -> Iterator[list[int]]:
        drawn = [_item(batch) for batch in self.batch_sampler] if self._state.is_main_process else None
        batches: list[list[int]] = operations.broadcast_object(drawn, self._state)
        if self._split is not None:
            yield from self._split_parts(batches)
            return
        processes = self._state.num_processes
        rounds = math.ceil(len(batches) / processes)
        last_round = batches[(rounds - 1) * processes :]
        padded_round = self.even_batches and len(last_round) < processes
        self._keep = sum(len(batch) for batch in last_round) if padded_round else None
        padded = batches + batches[: rounds * processes - len(batches)] if self.even_batches else batches
        yield from padded[self._state.process_index :: processes]

    def _split_parts(self, batches: list[list[int]]) -> Iterator[list[int]]:
        rank, processes, size = self._state.process_index, self._state.num_processes, self._split
        assert size is not None
        start = [index for batch in batches[:processes] for index in batch]
        for batch in batches:
            whole = len(batch) == size * processes
            self._keep = None if whole else len(batch)  # read while the epoch's last batch is in use
            yield batch[rank * size : (rank + 1) * size] if whole else _part(batch, rank, processes, size, True, start)

    def keep(self, batches: int) -> Keep:
        return self._keep

    def _check_even_batches(self, even_batches: bool) -> None:
        processes = self._state.num_processes
        # the sampler is Sized (_check_shardable), which its Sampler type does not say
        if not self._sized_items and even_batches and len(self.batch_sampler) % processes:  # type: ignore[arg-type]  # Sized
            items = len(self.batch_sampler)  # type: ignore[arg-type]  # Sized (see above)
            raise ValueError(
                f"prepare: this DataLoader has batch_size=None and its sampler yields {items} single "
                f"indices of whole batches, which do not divide evenly among {processes} processes. With "
                "even_batches=True accel would repeat whole batches whose rows it cannot count, so gather_for_metrics "
                f"could not drop them. Use a sampler whose length is a multiple of {processes}, "
                "DataLoaderConfiguration(even_batches=False), or let the DataLoader batch the samples (batch_size)."
            )
        if self._split is not None and not even_batches:
            raise ValueError(
                f"even_batches=False with split_batches=True needs the DataLoader's own BatchSampler over a "
                f"RandomSampler or SequentialSampler; this one's batch sampler is {type(self.batch_sampler).__name__}."
            )


def _item(batch: Any) -> Any:
    """A batch sampler's batch as a list of indices (a single index stays as it is)."""
    return batch if isinstance(batch, int) else list(batch)


class KeptDistributedSampler(Sharding):
    """A DistributedSampler the script built: used as is, its epoch set at each epoch."""

    def __init__(self, sampler: DistributedSampler[Any], batch_size: int, state: ProcessState) -> None:
        if (sampler.num_replicas, sampler.rank) != (state.num_processes, state.process_index):
            raise ValueError(
                f"the DataLoader's DistributedSampler has num_replicas={sampler.num_replicas}, rank={sampler.rank}, "
                f"but this is process {state.process_index} of {state.num_processes}. Leave the sampler out "
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

    def keep(self, batches: int) -> Keep:
        """The sampler pads the epoch's index list at its end, and process r takes positions r, r + W, ..."""
        sampler, processes = self.sampler, self._state.num_processes
        total = len(sampler.dataset)  # type: ignore[arg-type]  # a DistributedSampler's dataset has a len
        if sampler.drop_last or sampler.total_size == total:
            return None
        start = (batches - 1) * self._batch_size
        size = min(self._batch_size, sampler.num_samples - start)
        rows = [r * size + j for r in range(processes) for j in range(size) if (start + j) * processes + r < total]
        return rows if len(rows) < processes * size else None


def shard_loader(loader: DataLoader[Any], state: ProcessState,
                 config: DataLoaderConfiguration | None = None) -> tuple[DataLoader[Any], Sharding]:
    """The loader each process iterates, and how it is split; in one process, `loader` itself.

    For a map-style dataset; an IterableDataset's loader is split by
    accel.data.iterable_sharding.shard_iterable_loader (accel.data.loader picks).
    """
    config = config or DataLoaderConfiguration()
    if not state.distributed:
        return loader, Sharding()
    if isinstance(loader.sampler, DistributedSampler):
        _check_own_sampler(config)
        return loader, KeptDistributedSampler(loader.sampler, loader.batch_size or 1, state)
    if loader.batch_sampler is None:
        return _shard_unbatched(loader, state, config)
    _check_shardable(loader.batch_sampler, "batch sampler")
    batch_sampler = loader.batch_sampler
    sampler = getattr(batch_sampler, "sampler", None)
    split = _split_size(batch_sampler, state, config) if config.split_batches else None
    if type(batch_sampler) is BatchSampler and _plain_order(sampler):
        size = batch_sampler.batch_size if split is None else split
        shard: ShardedBatchSampler | BatchListShard = ShardedBatchSampler(sampler, size, batch_sampler.drop_last,
                                                                          state, config.even_batches)
        shard.batch_sampler = batch_sampler
    else:
        if split is not None and not config.even_batches:
            raise ValueError(
                f"DataLoaderConfiguration(split_batches=True, even_batches=False) needs the DataLoader's own "
                f"BatchSampler over a RandomSampler or SequentialSampler; this one's batch sampler is "
                f"{type(batch_sampler).__name__}. Use even_batches=True, or split_batches=False."
            )
        # a Sized batch sampler (_check_shardable above), which the DataLoader's attribute type does not say
        shard = BatchListShard(batch_sampler, state, config.even_batches, split)  # type: ignore[arg-type]  # Sized
    rebuilt = DataLoader(loader.dataset, batch_sampler=shard, **loader_options(loader))
    return rebuilt, shard


def _split_size(batch_sampler: Any, state: ProcessState, config: DataLoaderConfiguration) -> int:
    """Each process's share of a batch under `split_batches`; raise unless the batch size divides evenly."""
    size, processes = getattr(batch_sampler, "batch_size", None), state.num_processes
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


def _plain_order(sampler: Any) -> TypeGuard[RandomSampler | SequentialSampler]:
    """A SequentialSampler, or a RandomSampler that draws each sample once per epoch."""
    if type(sampler) is SequentialSampler:
        return True
    plain = type(sampler) in (RandomSampler, SeededRandomSampler)
    return plain and not sampler.replacement and sampler._num_samples is None


def _check_shardable(sampler: Any, what: str) -> None:
    """Refuse a (batch) sampler accel cannot split, saying what to do instead."""
    if not isinstance(sampler, Sized):
        raise TypeError(
            f"prepare: the DataLoader's {what} {type(sampler).__name__} has no len(), so it "
            "cannot be split into equal parts for every process. Give it a __len__."
        )


def _shard_unbatched(loader: DataLoader[Any], state: ProcessState,
                     config: DataLoaderConfiguration) -> tuple[DataLoader[Any], Sharding]:
    """batch_size=None: each item of the sampler is a batch. A BatchSampler's lists of indices are split like
    a batch sampler's batches (Accelerate's case); single indices (a dataset that returns whole batches) go
    to the processes in turn: process r takes items r, r + W, ... (module docstring of BatchListShard)."""
    sampler = loader.sampler
    _check_shardable(sampler, "sampler")
    lists = isinstance(sampler, BatchSampler)
    split = _split_size(sampler, state, config) if config.split_batches and lists else None
    if config.split_batches and not lists:
        raise ValueError(
            f"DataLoaderConfiguration(split_batches=True): this DataLoader has batch_size=None and its sampler "
            f"{type(sampler).__name__} yields single indices (the dataset returns whole batches), which accel cannot "
            "split between processes. Use split_batches=False (each process then takes every "
            f"{state.num_processes}-th item), or let the DataLoader batch the samples (give it a batch_size)."
        )
    shard = BatchListShard(
        sampler,  # type: ignore[arg-type]  # a Sized sampler (_check_shardable)
        state, config.even_batches, split, sized_items=lists,
    )
    shard._check_even_batches(config.even_batches)
    return DataLoader(loader.dataset, sampler=shard, batch_size=None, **loader_options(loader)), shard
