"""DataLoaderConfiguration with 2 real processes, run by test_dataloader_config.py under
`accel launch --num_processes 2 --cpu`:

    dataloader_config_script.py FOLDER

Each scenario builds an Accelerator with a DataLoaderConfiguration, prepares a small DataLoader
and reports what this rank saw: `split` (split_batches), `split_error` (a batch size that does
not divide), `uneven` and `gathered_*` (even_batches=False, with gather_for_metrics), `seeded`
(use_seedable_sampler, with the ranks' RNGs seeded differently), and `straight`/`resumed`
(save_state mid-epoch, then in a new Accelerator with use_stateful_dataloader=True load_state +
skip_first_batches, as an Accelerate script resumes), `resumed_default` (the same without the
option: the loader stays as prepared) and `fresh` (two epochs of a freshly prepared loader).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from launching import report
from torch.utils.data import DataLoader

from accel import Accelerator, skip_first_batches
from accel.utils import DataLoaderConfiguration

SEED = 5


def loader(size: int, batch_size: int, shuffle: bool = True) -> DataLoader[Any]:
    options = {"generator": torch.Generator().manual_seed(SEED)} if shuffle else {}
    return DataLoader(list(range(size)), batch_size=batch_size, shuffle=shuffle, **options)


def prepare(accelerator: Accelerator, data: DataLoader[Any]) -> Any:
    """accelerator.prepare(data), with the Accelerator's dataloader_config."""
    prepared = accelerator.prepare(data)
    assert prepared.config == accelerator.dataloader_config
    return prepared


def epochs(prepared: Any, count: int) -> list[list[list[int]]]:
    return [[batch.tolist() for batch in prepared] for _ in range(count)]


def split() -> None:
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(split_batches=True))
    report("split", epochs(prepare(accelerator, loader(13, 4)), 2))
    try:
        prepare(accelerator, loader(13, 3))
    except ValueError as error:
        report("split_error", str(error))


def uneven() -> None:
    accelerator = Accelerator(even_batches=False)
    prepared = prepare(accelerator, loader(10, 4, shuffle=False))
    report("uneven", {"len": len(prepared), "batches": epochs(prepared, 1)[0]})
    for even in (False, True):
        accelerator = Accelerator(even_batches=even)
        gathered = [accelerator.gather_for_metrics(batch).tolist() for batch in prepare(accelerator, loader(10, 3))]
        report(f"gathered_{even}", gathered)


def seeded() -> None:
    torch.manual_seed(100 * int(os.environ["RANK"]))  # data_seed decides, not the processes' RNGs
    config = DataLoaderConfiguration(use_seedable_sampler=True, data_seed=7)
    report("seeded", epochs(prepare(Accelerator(dataloader_config=config), loader(12, 3)), 2))


def resume(folder: Path) -> None:
    accelerator = Accelerator()
    prepared = prepare(accelerator, loader(14, 2))
    seen = epochs(prepared, 1)[0]
    for step, batch in enumerate(prepared):
        seen.append(batch.tolist())
        if step == 2:  # after the third batch of epoch 1
            accelerator.save_state(folder / "step")
            seen = []
    report("straight", seen + epochs(prepared, 1)[0])
    for stateful in (True, False):
        accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful))
        prepared = prepare(accelerator, loader(14, 2))
        accelerator.load_state(folder / "step")
        resumed = [batch.tolist() for batch in skip_first_batches(prepared, 3)]  # resume_step: 3 done in epoch 1
        report("resumed" if stateful else "resumed_default", resumed + epochs(prepared, 1)[0])
    report("fresh", epochs(prepare(Accelerator(), loader(14, 2)), 2))


if __name__ == "__main__":
    split()
    uneven()
    seeded()
    resume(Path(sys.argv[1]))
