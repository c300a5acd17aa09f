"""Checkpoints with several processes, run by test_checkpoints.py under `accel launch`.

    checkpoint_script.py FOLDER

Trains two epochs with 2 processes (gradient accumulation 2), saving in the middle of epoch 0
(inside an accumulation window) to FOLDER/mid and between the epochs to FOLDER/epoch; then a
second Accelerator in the same process loads FOLDER/mid and trains to the end. Each rank
reports both final parameter vectors. `build` and `train` are also used by the test in one process.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DataLoaderConfiguration
from launching import report

SAVE_AT = 5
"""The micro-batch (counted from 1) after which FOLDER/mid is saved: inside epoch 0 and inside a window."""


def build(stateful: bool = True) -> tuple[Accelerator, nn.Module, Any, Any, Any]:
    """`stateful`: use_stateful_dataloader, so that train() goes on where load_state put the loader."""
    config = DataLoaderConfiguration(use_stateful_dataloader=stateful)
    accelerator = Accelerator(gradient_accumulation_steps=2, dataloader_config=config)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(40, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=2, shuffle=True)
    return accelerator, *accelerator.prepare(model, optimizer, loader, scheduler)


def train(parts: tuple[Accelerator, nn.Module, Any, Any, Any], folder: Path | None = None) -> list[float]:
    """Train to the end of epoch 1 from wherever the loader stands; save on the way if `folder` is given."""
    accelerator, model, optimizer, loader, scheduler = parts
    micro_batches = 0
    for _ in range(loader.state_dict()["epoch"], 2):
        for inputs, targets in loader:
            with accelerator.accumulate(model):
                accelerator.backward(nn.functional.mse_loss(model(inputs), targets))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            micro_batches += 1
            if folder is not None and micro_batches == SAVE_AT:
                accelerator.save_state(folder / "mid")
        if folder is not None and micro_batches == len(loader):
            accelerator.save_state(folder / "epoch")
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def main(folder: Path) -> None:
    report("full", train(build(), folder))
    resumed = build()
    resumed[0].load_state(folder / "mid")
    report("resumed", train(resumed))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
