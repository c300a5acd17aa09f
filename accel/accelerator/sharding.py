"""Splitting a DataLoader between processes: each gets a disjoint part of every epoch.

The user's DataLoader is rebuilt around a batch sampler that hands each process its part, keeping
the dataset, batch size (per process), collate_fn, workers, drop_last, shuffling and generator.

Global step s of W processes with per-process batch B covers samples [s*W*B, (s+1)*W*B) of the
epoch's order, process r taking the r-th block of B. Together they see exactly the batch one
process with batch W*B would see, in the same order: training with W processes of batch B
follows training with one process of batch W*B. A last, short global batch is split evenly and
padded with samples from the start of the epoch, so that every process takes the same number of
steps (DDP needs that); `gather_for_metrics` drops those duplicates again.

The epoch's order is drawn as torch's RandomSampler draws it (a seed from the global RNG, or the
DataLoader's generator), once per epoch, then taken from process 0 on every process: the shards
stay disjoint even when the processes' RNGs differ. Other samplers and batch samplers are run on
process 0, and its list of batches is sent to all. A DistributedSampler the script made itself is
kept as it is (its epoch is set at each epoch).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized
from typing import Any, TypeGuard

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from accel.accelerator import operations
from accel.accelerator.operations import Keep
from accel.accelerator.state import ProcessState

_LOADER_OPTIONS = (
    "num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn", "multiprocessing_context",
    "generator", "prefetch_factor", "persistent_workers", "pin_memory_device", "in_order",
)
"""DataLoader arguments carried over to the rebuilt loader unchanged."""


class Sharding:
    """How a prepared loader is split; this base class is the unsplit loader (one process)."""

    def start_epoch(self, epoch: int) -> None:
        """Called as each epoch starts, with its number."""

    def keep(self, batches: int) -> Keep:
        """For the epoch's last batch (the `batches`-th): the rows of its gather that are not padding."""
        return None


class ShardedBatchSampler(Sampler[list[int]], Sharding):
    """This process's block of each global batch, from RandomSampler's or SequentialSampler's order."""

    def __init__(self, sampler: RandomSampler | SequentialSampler, batch_size: int, drop_last: bool,
                 state: ProcessState) -> None:
        self.sampler = sampler  # its generator is what checkpoints replay
        self.batch_size = batch_size
        self.drop_last = drop_last
        self._state = state
        self._size = len(sampler)
        self._step = batch_size * state.num_processes

    def __len__(self) -> int:
        steps = self._size / self._step
        return math.floor(steps) if self.drop_last else math.ceil(steps)

    def __iter__(self) -> Iterator[list[int]]:
        order = self._order()
        processes, rank, size = self._state.num_processes, self._state.process_index, self.batch_size
        for start in range(0, len(self) * self._step, self._step):
            block = order[start : start + self._step]
            if len(block) < self._step:  # the last global batch, short: split evenly, pad from the start
                size = math.ceil(len(block) / processes)
                block = block + [order[i % len(order)] for i in range(size * processes - len(block))]
            yield block[rank * size : (rank + 1) * size]

    def keep(self, batches: int) -> Keep:
        real = self._size - (len(self) - 1) * self._step
        return real if 0 < real < self._step else None

    def _order(self) -> list[int]:
        """The epoch's order, drawn like the sampler draws it, taken from process 0."""
        if isinstance(self.sampler, SequentialSampler):
            return list(range(self._size))
        generator = self.sampler.generator
        if generator is None:
            seed = torch.empty((), dtype=torch.int64).random_().reshape(1)
            generator = torch.Generator()
            generator.manual_seed(int(operations.broadcast(seed, self._state).item()))
        else:
            generator.set_state(operations.broadcast(generator.get_state(), self._state))
        return torch.randperm(self._size, generator=generator).tolist()


class BatchListShard(Sampler[list[int]], Sharding):
    """Batches r, r + W, r + 2W, ... of the user's batch sampler, as process 0 draws them."""

    def __init__(self, batch_sampler: Sampler[list[int]], state: ProcessState) -> None:
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)
        self._state = state
        self._sizes: list[int] = []

    def __len__(self) -> int:
        return math.ceil(len(self.batch_sampler) / self._state.num_processes)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[list[int]]:
        drawn = [list(batch) for batch in self.batch_sampler] if self._state.is_main_process else None
        batches: list[list[int]] = operations.broadcast_object(drawn, self._state)
        processes = self._state.num_processes
        rounds = math.ceil(len(batches) / processes)
        self._sizes = [len(batch) for batch in batches[(rounds - 1) * processes :]]
        padded = batches + batches[: rounds * processes - len(batches)]
        yield from padded[self._state.process_index :: processes]

    def keep(self, batches: int) -> Keep:
        return sum(self._sizes) if len(self._sizes) < self._state.num_processes else None


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

    def keep(self, batches: int) -> Keep:
        """The sampler pads the epoch's index list at its end, and process r takes positions r, r + W, ..."""
        sampler, processes = self.sampler, self._state.num_processes
        total = len(sampler.dataset)  # type: ignore[arg-type]
        if sampler.drop_last or sampler.total_size == total:
            return None
        start = (batches - 1) * self._batch_size
        size = min(self._batch_size, sampler.num_samples - start)
        rows = [r * size + j for r in range(processes) for j in range(size) if (start + j) * processes + r < total]
        return rows if len(rows) < processes * size else None


def shard_loader(loader: DataLoader[Any], state: ProcessState) -> tuple[DataLoader[Any], Sharding]:
    """The loader each process iterates, and how it is split; in one process, `loader` itself."""
    if not state.distributed:
        return loader, Sharding()
    _check_shardable(loader)
    if isinstance(loader.sampler, DistributedSampler):
        return loader, KeptDistributedSampler(loader.sampler, loader.batch_size or 1, state)
    batch_sampler = loader.batch_sampler
    sampler = getattr(batch_sampler, "sampler", None)
    if type(batch_sampler) is BatchSampler and _plain_order(sampler):
        shard: Sampler[list[int]] = ShardedBatchSampler(sampler, batch_sampler.batch_size, batch_sampler.drop_last,
                                                         state)
    else:
        shard = BatchListShard(batch_sampler, state)  # type: ignore[arg-type]
    options = {name: getattr(loader, name) for name in _LOADER_OPTIONS if hasattr(loader, name)}
    return DataLoader(loader.dataset, batch_sampler=shard, **options), shard  # type: ignore[return-value]


def _plain_order(sampler: Any) -> TypeGuard[RandomSampler | SequentialSampler]:
    """A SequentialSampler, or a RandomSampler that draws each sample once per epoch."""
    if type(sampler) is SequentialSampler:
        return True
    return type(sampler) is RandomSampler and not sampler.replacement and sampler._num_samples is None


def _check_shardable(loader: DataLoader[Any]) -> None:
    """Refuse loaders accel cannot split, saying what to do instead."""
    if isinstance(loader.dataset, IterableDataset):
        raise NotImplementedError(
            "prepare: this DataLoader reads an IterableDataset, which accel cannot split between processes "
            "(it has no indices to deal out). Build a map-style Dataset (with __len__ and __getitem__), or give "
            "each process its own stream and leave that DataLoader unprepared (move batches with .to(accelerator.device))."
        )
    if loader.batch_sampler is None:
        raise NotImplementedError(
            "prepare: this DataLoader has batch_size=None (it yields single samples), which accel does not split "
            "between processes. Give it a batch_size."
        )
    if not isinstance(loader.batch_sampler, Sized):
        raise TypeError(
            f"prepare: the DataLoader's batch sampler {type(loader.batch_sampler).__name__} has no len(), so it "
            "cannot be split into equal parts for every process. Give it a __len__."
        )
