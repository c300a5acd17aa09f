"""save_state in a second process group of the same processes, run by test_new_group_saves.py under
`accel launch --num_processes 2`.

    new_group_save_script.py FOLDER HOW

A first Accelerator prepares a tiny model, trains a step and saves twice (every process) to
FOLDER/first_a and FOLDER/first_b; its process group then ends, HOW:

* `end_training`: accelerator.end_training(); the next Accelerator makes a new group.
* `destroy`: end_training(), then the script's own dist.destroy_process_group().
* `own`: the script made each group itself (init_process_group on a store of its own), and
  destroys the first before making the second.
* `destroy_async`: FOLDER/first_b is saved asynchronously, its write slowed by 3 s, and the script
  destroys the group (dist.destroy_process_group(), no end_training) while it is written.

A second Accelerator (in the new group) then saves to FOLDER/second (every process), loads it
and FOLDER/first_b, and saves asynchronously to FOLDER/second_async. Each rank reports the
parameters after each load and the warnings save_state gave.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, InitProcessGroupKwargs
from launching import report

TIMEOUT = datetime.timedelta(seconds=40)
"""The collective timeout: a process left waiting fails the run within it, not in 30 minutes."""


def build() -> tuple[Accelerator, nn.Module, Any, Any]:
    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=TIMEOUT)])
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    return accelerator, *accelerator.prepare(model, optimizer, loader)


def step(accelerator: Accelerator, model: nn.Module, optimizer: Any, loader: Any) -> None:
    inputs, targets = next(iter(loader))
    accelerator.backward(nn.functional.mse_loss(model(inputs), targets))
    optimizer.step()
    optimizer.zero_grad()


def flat(model: nn.Module) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def own_group(generation: int) -> None:
    """The script's own group, on keys of its own in the launcher's store (as a script that makes its group does)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world, timeout=TIMEOUT))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"script_{generation}", store), rank=rank,
                            world_size=world, timeout=TIMEOUT)


def slow_down_background_writes() -> None:
    """Each asynchronous save's write starts 3 s late: the group ends, and the next one begins, meanwhile."""
    from accel.checkpointing import async_save

    write = async_save.write_files

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(3)
        return write(*args, **kwargs)

    async_save.write_files = slow  # type: ignore[assignment]


def main(folder: Path, how: str) -> None:
    caught: list[str] = []
    if how == "own":
        own_group(0)
    accelerator, model, optimizer, loader = build()
    step(accelerator, model, optimizer, loader)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        accelerator.save_state(folder / "first_a")
        step(accelerator, model, optimizer, loader)
        if how == "destroy_async":
            slow_down_background_writes()
        accelerator.save_state(folder / "first_b", async_save=how == "destroy_async")
    caught += [str(w.message) for w in seen if "save_state" in str(w.message)]
    report("first_b", flat(model))
    if how in ("end_training", "destroy"):
        accelerator.end_training()
    if how in ("destroy", "own", "destroy_async"):
        dist.destroy_process_group()
    if how == "own":
        own_group(1)

    accelerator, model, optimizer, loader = build()
    step(accelerator, model, optimizer, loader)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        accelerator.save_state(folder / "second")
        report("second", flat(model))
        step(accelerator, model, optimizer, loader)
        accelerator.load_state(folder / "second")
        report("loaded_second", flat(model))
        accelerator.load_state(folder / "first_b")
        report("loaded_first_b", flat(model))
        accelerator.save_state(folder / "second_async", async_save=True)
        accelerator.end_training()
    caught += [str(w.message) for w in seen if "save_state" in str(w.message)]
    report("warnings", caught)
    if how == "own":
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
