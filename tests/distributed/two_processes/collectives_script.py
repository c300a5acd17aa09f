"""Run by test_collectives.py under `accel launch --num_processes 2 --cpu`: collectives, data shards,
configuration checks and the process group's life cycle, each reported per rank.

    collectives_script.py ORDER_FILE
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, TensorDataset, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler

from accel import Accelerator
from accel.utils.operations import DistributedOperationException
from launching import report


def main(order_file: str) -> None:
    torch.manual_seed(1000 + int(os.environ["RANK"]))  # the ranks' RNGs differ: shards must not care
    accelerator = Accelerator()
    rank = accelerator.process_index
    report("layout", [rank, accelerator.local_process_index, accelerator.num_processes,
                      accelerator.is_main_process, accelerator.is_local_main_process, str(accelerator.device)])
    collectives(accelerator, rank)
    ordering(accelerator, rank, order_file)
    shards(accelerator)
    configuration(accelerator, rank)


def collectives(accelerator: Accelerator, rank: int) -> None:
    nested = {"a": torch.full((rank + 1, 2), float(rank)), "b": [torch.tensor(rank * 10), torch.tensor([rank, 7])]}
    gathered = accelerator.gather(nested)
    report("gather", {"a": gathered["a"].tolist(), "b0": gathered["b"][0].tolist(), "b1": gathered["b"][1].tolist()})
    summed = accelerator.reduce({"x": torch.tensor([1.0, rank]), "n": torch.tensor(rank + 1)}, "sum")
    mean = accelerator.reduce(torch.tensor([2.0 * (rank + 1)]), reduction="mean")
    report("reduce", {"x": summed["x"].tolist(), "n": summed["n"].item(), "mean": mean.tolist()})
    report("objects", accelerator.gather_for_metrics([f"r{rank}", rank], use_gather_object=True))
    try:
        accelerator.gather(torch.zeros(2, 3 + rank))
    except ValueError as error:
        report("mismatch", str(error))
    try:  # per-sample values of an uneven last batch: was a hang
        accelerator.reduce(torch.ones(3 - rank))
    except DistributedOperationException as error:
        report("reduce mismatch", str(error))
    try:
        accelerator.broadcast([torch.zeros(2), torch.zeros(1 + rank, 2)])
    except DistributedOperationException as error:
        report("broadcast mismatch", str(error))
    try:  # Accelerate's own check (test_ops.test_op_checker): a different number of dimensions
        accelerator.pad_across_processes({"tensor": torch.zeros((1, 5) if rank == 0 else (1, 1, 6))})
    except DistributedOperationException as error:
        report("pad mismatch", str(error))
    accelerator.print("PRINTED by", rank)


def ordering(accelerator: Accelerator, rank: int, order_file: str) -> None:
    """main_process_first: the main process runs the block to its end before the others start it."""
    with accelerator.main_process_first():
        with open(order_file, "a") as file:
            file.write(f"{rank} start\n")
            file.flush()
            time.sleep(0.3)
            file.write(f"{rank} end\n")
    accelerator.wait_for_everyone()
    with open(order_file) as file:
        report("order", file.read().split("\n")[:-1])
    report("on_main", accelerator.on_main_process(lambda: "ran")())


def epochs(accelerator: Accelerator, loader: Any, count: int = 2) -> tuple[list[list[int]], list[list[int]], int]:
    """(this rank's samples per epoch, the gathered samples per epoch without padding, len(prepared))."""
    prepared = accelerator.prepare(loader)
    mine, everyone = [], []
    for _ in range(count):
        seen: list[int] = []
        gathered: list[int] = []
        for (batch,) in prepared:
            seen += batch.tolist()
            gathered += accelerator.gather_for_metrics(batch).tolist()
        mine.append(seen)
        everyone.append(gathered)
    return mine, everyone, len(prepared)


def shards(accelerator: Accelerator) -> None:
    dataset = TensorDataset(torch.arange(11))
    generator = torch.Generator().manual_seed(int(os.environ["RANK"]))  # differs per rank: rank 0's is used
    loaders = {
        "shuffled": DataLoader(dataset, batch_size=2, shuffle=True),
        "generator": DataLoader(dataset, batch_size=2, shuffle=True, generator=generator),
        "sequential_drop_last": DataLoader(dataset, batch_size=2, drop_last=True),
        "weighted": DataLoader(dataset, batch_sampler=BatchSampler(
            WeightedRandomSampler([1.0] * 11, num_samples=9, replacement=True), batch_size=2, drop_last=False)),
        "distributed_sampler": DataLoader(dataset, batch_size=2, sampler=DistributedSampler(dataset, seed=3)),
    }
    for name, loader in loaders.items():
        mine, everyone, length = epochs(accelerator, loader)
        report(f"shard_{name}", {"mine": mine, "everyone": everyone, "len": length})


def configuration(accelerator: Accelerator, rank: int) -> None:
    """A second Accelerator reuses the group; a differing one is refused on every rank; after
    end_training collectives still run, and a new Accelerator creates a new group."""
    second = Accelerator(mixed_precision="bf16")
    report("second", second.reduce(torch.ones(1)).item())
    try:
        Accelerator(mixed_precision="fp16" if rank == 0 else "bf16")
    except ValueError as error:
        report("differs", str(error))
    accelerator.end_training()
    accelerator.wait_for_everyone()  # transformers' examples save after end_training: collectives still run
    report("after end", accelerator.reduce(torch.ones(1)).item())
    again = Accelerator()
    report("again", again.reduce(torch.ones(1)).item())
    again.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
