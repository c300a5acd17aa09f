"""Splitting a DataLoader over an IterableDataset between processes (Accelerate's IterableDatasetShard).

Every process iterates the whole stream and keeps its own slice of each global batch: with W
processes of batch B, global batch s is elements [s*W*B, (s+1)*W*B) of the stream, process r
keeping the r-th block of B (with `split_batches`, the DataLoader's batch_size is the global
batch and each process keeps batch_size / W of it). Together the processes see, step by step,
the batches one process with batch W*B would see, in the same order.

The last, short global batch:
* `drop_last=True`: dropped on every process (as Accelerate).
* `even_batches=True` (the default): completed by repeating elements from the start of that
  epoch's stream, so that every process gets the same number of full batches; those batches are
  tagged with how many of the global batch's elements are real, and `gather_for_metrics` keeps only
  those (the repeats come last in the gather). Accelerate pads the same way.
* `even_batches=False`: process r keeps its block as it is (short or empty): no element is
  repeated, and processes may then take different numbers of batches (use
  `join_uneven_inputs`). Accelerate's IterableDatasetShard ignores even_batches and always pads.

The processes must see the same stream: a dataset that shuffles with its own `generator`
attribute (a torch.Generator) gets process 0's generator state at the start of every epoch (what
Accelerate's synchronized generator does); other randomness in the dataset is the script's to
seed identically. With DataLoader workers, each worker's part of the stream is split the same
way (the dataset must split itself between workers, as with plain torch); the last global batch
of each worker is then the short one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data._utils.collate import default_collate, default_convert

from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader_options import loader_options
from accel.data.sharding import Sharding
from accel.distributed import operations
from accel.distributed.operations import Keep
from accel.distributed.process_state import ProcessState


class Tail:
    """An element of a padded last batch: the element, and how many elements of its global batch are real."""

    __slots__ = ("element", "real")

    def __init__(self, element: Any, real: int) -> None:
        self.element = element
        self.real = real


class TaggedBatch:
    """A collated batch that holds repeated elements: the batch, and the real rows of its global batch."""

    __slots__ = ("batch", "real")

    def __init__(self, batch: Any, real: int) -> None:
        self.batch = batch
        self.real = real

    def __reduce__(self) -> tuple[Any, ...]:  # crosses from DataLoader workers to the main process
        return (TaggedBatch, (self.batch, self.real))


class TailCollate:
    """The user's collate_fn, applied to the elements of padded batches too (then wrapped in a TaggedBatch)."""

    def __init__(self, collate_fn: Callable[[list[Any]], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, elements: list[Any]) -> Any:
        if elements and type(elements[0]) is Tail:
            return TaggedBatch(self.collate_fn([e.element for e in elements]), elements[0].real)
        return self.collate_fn(elements)


class IterableDatasetShard(IterableDataset):
    """This process's elements of `dataset` (see the module docstring); `batch_size` is this process's
    batch (with `split_batches`, the global one), `drop_last` and `even_batches` decide the last batch."""

    def __init__(self, dataset: IterableDataset, batch_size: int = 1, drop_last: bool = False,
                 num_processes: int = 1, process_index: int = 0, split_batches: bool = False,
                 even_batches: bool = True) -> None:
        if split_batches and batch_size % num_processes:
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
        self.even_batches = even_batches
        self.epoch = 0
        self.tag_tail = False
        """True (a prepared loader's shard): the elements of a padded last batch come as `Tail`s, which
        TailCollate turns into a TaggedBatch, so that the prepared loader knows the batch's real rows."""

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
        """Elements this process yields in an epoch (TypeError when the dataset has no len)."""
        full, rest = divmod(len(self.dataset), self.global_size)  # type: ignore[arg-type]  # TypeError if unsized
        if rest == 0 or self.drop_last:
            return full * self.part
        if self.even_batches:
            return (full + 1) * self.part
        return full * self.part + min(max(rest - self.process_index * self.part, 0), self.part)

    def __iter__(self) -> Iterator[Any]:
        size, part = self.global_size, self.part
        start, stop = self.process_index * part, (self.process_index + 1) * part
        first: list[Any] | None = None
        batch: list[Any] = []
        for element in self.dataset:
            batch.append(element)
            if len(batch) == size:
                yield from batch[start:stop]
                first = batch if first is None else first
                batch = []
        if not batch or self.drop_last:
            return
        if not self.even_batches:
            yield from batch[start:stop]
            return
        real = len(batch)
        source = itertools.cycle(first if first is not None else list(batch))
        batch.extend(itertools.islice(source, size - real))
        if self.tag_tail:
            yield from (Tail(element, real) for element in batch[start:stop])
        else:
            yield from batch[start:stop]


class IterableSharding(Sharding):
    """The prepared loader's view of an IterableDatasetShard (sharding.Sharding's interface)."""

    def __init__(self, shard: IterableDatasetShard, state: ProcessState) -> None:
        self.shard = shard
        self._state = state
        self.tail_real: int | None = None
        """Real rows of the global batch in use, when that batch holds repeated elements (set by loader.py)."""

    @property
    def even_batches(self) -> bool:
        """The shard's even_batches (join_uneven_inputs(even_batches=...) overrides it inside its block)."""
        return self.shard.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.shard.even_batches = value

    def start_epoch(self, epoch: int) -> None:
        self.tail_real = None
        self.shard.epoch = epoch  # the prepared loader passes it to the dataset's own set_epoch
        generator = getattr(self.shard.dataset, "generator", None)
        if isinstance(generator, torch.Generator):
            generator.set_state(operations.broadcast(generator.get_state(), self._state, check_shapes=False))

    def keep(self, batches: int) -> Keep:
        return self.tail_real

def shard_iterable_loader(loader: DataLoader[Any], state: ProcessState,
                          config: DataLoaderConfiguration) -> tuple[DataLoader[Any], IterableSharding]:
    """`loader` rebuilt around an IterableDatasetShard of its dataset, and its sharding."""
    size = loader.batch_size
    if size is None:
        raise NotImplementedError(
            "prepare: this DataLoader reads an IterableDataset with batch_size=None (the dataset yields whole "
            "batches), which accel cannot split into equal parts for every process. Let the DataLoader batch the "
            "samples (give it a batch_size), or give each process its own stream and leave the DataLoader "
            "unprepared (move batches with .to(accelerator.device))."
        )
    if config.split_batches and size % state.num_processes:
        raise ValueError(
            f"DataLoaderConfiguration(split_batches=True): the DataLoader's batch_size={size} cannot be split over "
            f"num_processes={state.num_processes}: it must be a multiple of {state.num_processes}. Use such a "
            "batch_size, or split_batches=False (each process then gets batches of batch_size)."
        )
    # the loader's dataset is an IterableDataset here (accel.data.loader picks this sharding for one)
    shard = IterableDatasetShard(
        loader.dataset,  # type: ignore[arg-type]  # an IterableDataset: see above
        size, loader.drop_last, state.num_processes, state.process_index, config.split_batches, config.even_batches,
    )
    shard.tag_tail = True
    options = loader_options(loader)
    collate = options.get("collate_fn")
    if collate is None or collate is default_convert:  # torch's defaults with batching: default_collate
        collate = default_collate
    options["collate_fn"] = TailCollate(collate)
    rebuilt = DataLoader(shard, batch_size=shard.part, drop_last=False, **options)
    return rebuilt, IterableSharding(shard, state)
