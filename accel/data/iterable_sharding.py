"""Splitting a DataLoader over an IterableDataset between processes, when batches are not dispatched
(`DataLoaderConfiguration(dispatch_batches=False)`; the default for an IterableDataset is dispatching,
dispatching.py). Accelerate's IterableDatasetShard, element for element:

Every process iterates the whole stream and keeps its own slice of each global batch: with W
processes of batch B, global batch s is elements [s*W*B, (s+1)*W*B) of the stream, process r
keeping the r-th block of B (with `split_batches`, the DataLoader's batch_size is the global
batch and each process keeps batch_size / W of it).

The last, short global batch is dropped with `drop_last`, else completed by repeating elements of
the epoch's first global batch, whatever `even_batches` says (Accelerate's IterableDatasetShard has
no such option). As Accelerate, `gather_for_metrics` keeps those repeats (the loader's remainder is 0).

The processes must see the same stream: a dataset with a torch.Generator `generator` and no
`set_epoch` is reseeded with the epoch number each epoch (Accelerate's rule); with `set_epoch`, its
generator's state is taken from process 0 as each epoch starts. Other randomness in the dataset is
the script's to seed identically. A Hugging Face `datasets.IterableDataset` with at least W shards
is split by shards instead (`dataset.shard`), as Accelerate does.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader_options import loader_options
from accel.data.sharding import Sharding
from accel.distributed import operations
from accel.distributed.process_state import ProcessState


class IterableDatasetShard(IterableDataset):
    """This process's elements of `dataset` (Accelerate's IterableDatasetShard: same arguments, elements and
    len; see the module docstring). `batch_size` is this process's batch (with `split_batches`, the global one).

    Example: on 2 processes with batch_size=2, a stream 0, 1, ..., 4 gives process 0 the elements
    0, 1, 4, 0 (its batches [0, 1], [4, 0]) and process 1 the elements 2, 3, 1, 2."""

    def __init__(self, dataset: IterableDataset, batch_size: int = 1, drop_last: bool = False,
                 num_processes: int = 1, process_index: int = 0, split_batches: bool = False) -> None:
        if split_batches and batch_size > 1 and batch_size % num_processes:
            raise ValueError(
                f"IterableDatasetShard(split_batches=True): batch_size={batch_size} cannot be split over "
                f"num_processes={num_processes}; give a multiple of {num_processes}."
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.epoch = 0

    @property
    def part(self) -> int:
        """Elements this process takes from each global batch."""
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    @property
    def global_size(self) -> int:
        """Elements in each global batch."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and pass it on to the dataset's own set_epoch (Accelerate's meaning)."""
        self.epoch = epoch
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def __len__(self) -> int:
        """Accelerate's count (TypeError when the dataset has no len): whole batches of batch_size x
        num_processes elements, the last one counted too unless drop_last. (With split_batches this is
        num_processes times what a process takes; Accelerate counts so, and scripts size schedules by it.)"""
        whole, rest = divmod(len(self.dataset), self.batch_size * self.num_processes)  # type: ignore[arg-type]  # TypeError if unsized
        return (whole + (1 if rest and not self.drop_last else 0)) * self.batch_size

    def __iter__(self) -> Iterator[Any]:
        generator = getattr(self.dataset, "generator", None)
        if not hasattr(self.dataset, "set_epoch") and isinstance(generator, torch.Generator):
            generator.manual_seed(self.epoch)  # Accelerate reseeds such a dataset with the epoch number
        size, part = self.global_size, self.part
        mine = slice(self.process_index * part, (self.process_index + 1) * part)
        first: list[Any] | None = None
        batch: list[Any] = []
        for element in self.dataset:
            batch.append(element)
            if len(batch) == size:
                yield from batch[mine]
                first = batch if first is None else first
                batch = []
        if not batch or self.drop_last:
            return
        source = itertools.cycle(first if first is not None else list(batch))
        batch.extend(itertools.islice(source, size - len(batch)))
        yield from batch[mine]


class IterableSharding(Sharding):
    """The prepared loader's view of an IterableDatasetShard (sharding.Sharding's interface); `synchronize`:
    take the dataset's generator from process 0 as each epoch starts (with several real processes)."""

    def __init__(self, shard: IterableDataset, state: ProcessState, synchronize: bool) -> None:
        self.shard = shard
        self._state = state
        self._synchronize = synchronize

    def start_epoch(self, epoch: int) -> None:
        generator = getattr(getattr(self.shard, "dataset", self.shard), "generator", None)
        if self._synchronize and isinstance(generator, torch.Generator):
            generator.set_state(operations.broadcast(generator.get_state(), self._state, check_shapes=False))


def shard_iterable_loader(loader: DataLoader[Any], state: ProcessState, config: DataLoaderConfiguration,
                          layout: tuple[int, int] | None = None) -> tuple[DataLoader[Any], Sharding]:
    """`loader` rebuilt around this process's part of its dataset (process `layout[1]` of `layout[0]`,
    default: this one of this run), and its sharding; in one process, `loader` itself."""
    processes, rank = layout if layout is not None else (state.data_parallel_size, state.data_parallel_index)
    if processes == 1:
        return loader, Sharding()
    size = loader.batch_size
    if size is None:
        raise NotImplementedError(
            "prepare: this DataLoader reads an IterableDataset with batch_size=None (the dataset yields whole "
            "batches), which accel cannot split into equal parts for every process. Let the DataLoader batch the "
            "samples (give it a batch_size), use DataLoaderConfiguration(dispatch_batches=True), or give each "
            "process its own stream and leave the DataLoader unprepared (move batches with .to(accelerator.device))."
        )
    if config.split_batches and size > 1 and size % processes:
        raise ValueError(
            f"DataLoaderConfiguration(split_batches=True): the DataLoader's batch_size={size} cannot be split over "
            f"num_processes={processes}: it must be a multiple of {processes}. Use such a "
            "batch_size, or split_batches=False (each process then gets batches of batch_size)."
        )
    real = (processes, rank) == (state.data_parallel_size, state.data_parallel_index) and state.distributed
    options = loader_options(loader)
    batch = size // processes if config.split_batches else size
    hub = _hub_shard(loader.dataset, processes, rank, config)
    if hub is not None:  # a datasets.IterableDataset with enough shards: each process reads its own (as Accelerate)
        return DataLoader(hub, batch_size=size, drop_last=loader.drop_last, **options), Sharding()
    shard = IterableDatasetShard(
        loader.dataset,  # type: ignore[arg-type]  # an IterableDataset (accel.data.loader picks this sharding for one)
        size, loader.drop_last, processes, rank, config.split_batches,
    )
    rebuilt = DataLoader(shard, batch_size=batch, drop_last=loader.drop_last, **options)
    return rebuilt, IterableSharding(shard, state, real)


def _hub_shard(dataset: Any, processes: int, rank: int, config: DataLoaderConfiguration) -> Any:
    """Process `rank`'s shard of a Hugging Face `datasets.IterableDataset` with at least `processes` shards
    (not with split_batches), as Accelerate takes it; None for any other dataset."""
    if config.split_batches or "datasets" not in sys.modules:
        return None
    hub_iterable = getattr(sys.modules["datasets"], "IterableDataset", None)
    if hub_iterable is None or not isinstance(dataset, hub_iterable) or dataset.n_shards < processes:
        return None
    return dataset.shard(num_shards=processes, index=rank)
