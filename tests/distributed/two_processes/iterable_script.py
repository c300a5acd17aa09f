"""IterableDataset and batch_size=None loaders with 2 real processes, run by test_iterable_sharding.py
under `accel launch --num_processes 2 --cpu`:

    iterable_script.py

Each scenario prepares a small DataLoader and reports what this rank saw, per epoch: the batches,
what gather_for_metrics returned for each, `end_of_dataloader` and `remainder` at the last batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from launching import report
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
    get_worker_info,
)

from accel import Accelerator
from accel.utils import DataLoaderConfiguration


class Stream(IterableDataset):  # type: ignore[type-arg]
    """0, 1, ..., size-1, without __len__; with `set_epoch`, epoch e yields them rotated by e;
    split between DataLoader workers by position (worker k of n: elements k, k + n, ...)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def __iter__(self) -> Iterator[int]:
        shift = self.epochs[-1] if self.epochs else 0
        info = get_worker_info()
        k, n = (info.id, info.num_workers) if info is not None else (0, 1)
        for position in range(k, self.size, n):
            yield (position + shift) % self.size


class SizedStream(Stream):
    def __len__(self) -> int:
        return self.size


class Shuffled(IterableDataset):  # type: ignore[type-arg]
    """A permutation of range(size) drawn from its own `generator` every pass."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[int]:
        yield from torch.randperm(self.size, generator=self.generator).tolist()


class Batches(Dataset):  # type: ignore[type-arg]
    """Item i is the whole batch [3i, 3i + 1, 3i + 2]."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: Any) -> torch.Tensor:
        if isinstance(index, list):  # a BatchSampler's list of indices
            return torch.tensor(index)
        return torch.arange(3 * index, 3 * index + 3)


def run_epochs(accelerator: Accelerator, prepared: Any, epochs: int = 2) -> list[dict[str, Any]]:
    seen = []
    for _ in range(epochs):
        batches, gathered, state = [], [], accelerator.gradient_state
        for batch in prepared:
            batches.append(batch.tolist())
            gathered.append(accelerator.gather_for_metrics(batch).tolist())
            last = {"end": state.end_of_dataloader, "remainder": state.remainder,
                    "active": state.active_dataloader is prepared}
        seen.append({"batches": batches, "gathered": gathered, "last": last})
    return seen


def iterable(name: str, dataset: IterableDataset, batch_size: int, drop_last: bool = False,  # type: ignore[type-arg]
             epochs: int = 2, **config: Any) -> None:
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(**config))
    prepared = accelerator.prepare(DataLoader(dataset, batch_size=batch_size, drop_last=drop_last))
    report(name, run_epochs(accelerator, prepared, epochs))
    try:
        report(f"{name}_len", len(prepared))
    except TypeError as error:
        report(f"{name}_len", str(error))
    if isinstance(dataset, Stream):
        report(f"{name}_set_epoch", dataset.epochs)


def uneven() -> None:
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    prepared = accelerator.prepare(DataLoader(Stream(11), batch_size=3))
    report("uneven", [[batch.tolist() for batch in prepared]])


def workers() -> None:
    """Two DataLoader workers per process: each worker's part of the stream is split the same way."""
    accelerator = Accelerator()
    prepared = accelerator.prepare(DataLoader(Stream(22), batch_size=3, num_workers=2))
    steps = []
    for batch in prepared:
        gathered = accelerator.gather(batch)
        keep = prepared.gathered_rows_to_keep()
        steps.append({"batch": batch.tolist(), "kept": (gathered if keep is None else gathered[:keep]).tolist()})
    report("workers", steps)


def explicit_epoch() -> None:
    """set_epoch(5) before the loop: the dataset's set_epoch gets 5, then 6 for the next epoch."""
    accelerator = Accelerator()
    dataset = Stream(8)
    prepared = accelerator.prepare(DataLoader(dataset, batch_size=2))
    prepared.set_epoch(5)
    epochs = [[batch.tolist() for batch in prepared] for _ in range(2)]
    report("explicit_epoch", {"epochs": epochs, "set_epoch": dataset.epochs, "iteration": prepared.iteration})


def shuffled() -> None:
    """A dataset shuffling with its own generator, seeded differently on each rank: process 0's is used."""
    accelerator = Accelerator()
    prepared = accelerator.prepare(DataLoader(Shuffled(12, seed=accelerator.process_index), batch_size=2))
    report("shuffled", run_epochs(accelerator, prepared))


def join_override() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    prepared = accelerator.prepare(DataLoader(Stream(11), batch_size=3))
    with accelerator.join_uneven_inputs([model], even_batches=False):
        inside = [batch.tolist() for batch in prepared]
    report("join_override", {"inside": inside, "after": [batch.tolist() for batch in prepared]})


def unbatched() -> None:
    """batch_size=None: a BatchSampler as the sampler, then single indices of whole batches."""
    accelerator = Accelerator()
    lists = DataLoader(Batches(4), sampler=BatchSampler(SequentialSampler(range(10)), 3, False), batch_size=None)
    report("unbatched_lists", run_epochs(accelerator, accelerator.prepare(lists), 1))
    report("unbatched_items", run_epochs(accelerator, accelerator.prepare(DataLoader(Batches(4), batch_size=None)), 1))
    try:
        accelerator.prepare(DataLoader(Batches(5), batch_size=None))
        report("unbatched_error", None)
    except ValueError as error:
        report("unbatched_error", str(error))


def main() -> None:
    iterable("sized", SizedStream(23), 3)
    iterable("unsized", Stream(23), 3)
    iterable("split", Stream(10), 4, split_batches=True, epochs=1)
    iterable("drop_last", Stream(11), 3, drop_last=True, epochs=1)
    iterable("tiny", Stream(2), 3, epochs=1)
    uneven()
    workers()
    explicit_epoch()
    shuffled()
    join_override()
    unbatched()


if __name__ == "__main__":
    main()
