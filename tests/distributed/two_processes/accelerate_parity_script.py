"""Prepared dataloaders on 2 real processes, under accel and under Accelerate in the same run, run by
test_accelerate_parity.py under `accel launch --num_processes 2 --cpu`:

    accelerate_parity_script.py

For each scenario both libraries prepare the same DataLoader (torch seeded alike before each) and
this rank reports, per epoch and batch: the batch, `gather_for_metrics` of it and of a per-batch
value repeated to the batch size (a mean loss, as transformers' scripts gather it),
`end_of_dataloader` and `remainder`; and `len()` of the prepared loader.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import accelerate
import accelerate.utils
import torch
from launching import report
from torch.utils.data import DataLoader, Dataset, IterableDataset

import accel
import accel.utils


class Stream(IterableDataset):  # type: ignore[type-arg]
    """0, 1, ..., size - 1; with a len when `sized`."""

    def __init__(self, size: int, sized: bool = False) -> None:
        self.size, self.sized = size, sized

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("no len")
        return self.size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.size))


class Records(Dataset):  # type: ignore[type-arg]
    """Item i is {"x": i, "y": [i, -i]} (batches of dicts)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": torch.tensor(index), "y": torch.tensor([index, -index])}


SCENARIOS: dict[str, tuple[Callable[[], Any], dict[str, Any], dict[str, Any]]] = {
    # name: (dataset, DataLoader options, DataLoaderConfiguration options)
    "iterable_default_dispatch": (lambda: Stream(23), {"batch_size": 3}, {}),
    "iterable_sized_dispatch": (lambda: Stream(11, sized=True), {"batch_size": 3}, {}),
    "iterable_split": (lambda: Stream(10), {"batch_size": 4}, {"split_batches": True}),
    "iterable_drop_last": (lambda: Stream(11), {"batch_size": 3, "drop_last": True}, {}),
    "iterable_tiny": (lambda: Stream(1), {"batch_size": 3}, {}),
    "iterable_sharded": (lambda: Stream(11, sized=True), {"batch_size": 3}, {"dispatch_batches": False}),
    "map_dispatch": (lambda: list(range(10)), {"batch_size": 4}, {"dispatch_batches": True}),
    "map_dispatch_shuffled": (lambda: list(range(13)), {"batch_size": 3, "shuffle": True}, {"dispatch_batches": True}),
    "map_dispatch_split": (lambda: list(range(11)), {"batch_size": 4}, {"dispatch_batches": True, "split_batches": True}),
    "map_dispatch_dicts": (lambda: Records(9), {"batch_size": 2}, {"dispatch_batches": True}),
    "map_sharded_shuffled": (lambda: list(range(13)), {"batch_size": 3, "shuffle": True}, {}),
    "map_sharded_split": (lambda: list(range(11)), {"batch_size": 4}, {"split_batches": True}),
}


def rows(batch: Any) -> torch.Tensor:
    return batch["x"] if isinstance(batch, dict) else batch


def epochs(accelerator: Any, prepared: Any, count: int = 2) -> list[list[Any]]:
    seen = []
    for _ in range(count):
        steps = []
        for batch in prepared:
            x = rows(batch)
            repeated = x.float().mean().repeat(x.shape[0] if x.ndim else 1)
            state = accelerator.gradient_state
            steps.append([x.tolist(), accelerator.gather_for_metrics(x).tolist(),
                          accelerator.gather_for_metrics(repeated).tolist(), state.end_of_dataloader, state.remainder])
            if isinstance(batch, dict):
                steps[-1].append(accelerator.gather_for_metrics(batch)["y"].tolist())
        seen.append(steps)
    return seen


def run(library: Any, make: Callable[[], Any], loader_options: dict[str, Any], config: dict[str, Any]) -> Any:
    torch.manual_seed(5)
    accelerator = library.Accelerator(cpu=True, dataloader_config=library.utils.DataLoaderConfiguration(**config))
    prepared = accelerator.prepare(DataLoader(make(), **loader_options))
    try:
        length: Any = len(prepared)
    except TypeError:
        length = None
    return {"len": length, "epochs": epochs(accelerator, prepared)}


def main() -> None:
    for name, (make, loader_options, config) in SCENARIOS.items():
        report(name, {"accel": run(accel, make, loader_options, config),
                      "accelerate": run(accelerate, make, loader_options, config)})
    if torch.distributed.is_initialized():  # leave the group together (a gloo rank exiting early can abort the other)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    # Accelerate runs in this process too, and its processes sometimes abort at interpreter shutdown after
    # reporting ("terminate called without an active exception"): end here; the reports are written.
    os._exit(0)
