"""Saves made by the main process alone, as diffusers' and peft's scripts make them, run by
test_main_process_saves.py under `accel launch --num_processes 2`.

    main_process_save_script.py FOLDER

Trains a few steps; inside `if accelerator.is_main_process:` calls save_state (directly and
through a helper function), save_model and save; then a save_state guarded by a test accel does
not recognise (`process_index == 0`, which costs the grace wait); then save_state from every
process; then a fresh Accelerator on every process resumes the main-process checkpoint.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from launching import report


def build() -> tuple[Accelerator, nn.Module, Any, Any]:
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=2)
    return accelerator, *accelerator.prepare(model, optimizer, loader)


def flat(model: nn.Module) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def main(folder: Path) -> None:
    accelerator, model, optimizer, loader = build()

    def save_checkpoint(name: str) -> None:  # a helper called inside the `if`, as diffusers' hooks are
        accelerator.save_state(folder / name)

    for step, (inputs, targets) in enumerate(loader):
        accelerator.backward(nn.functional.mse_loss(model(inputs), targets))
        optimizer.step()
        optimizer.zero_grad()
        if accelerator.is_main_process and step == 1:
            accelerator.save_state(folder / "main")
            report("saved", flat(model))
            accelerator.save_model(model, folder / "model")
            accelerator.save({"step": step}, folder / "object.pt")
            accelerator.unwrap_model(model).state_dict()
        if step == 2 and accelerator.is_main_process:
            save_checkpoint("helper")
        if step == 3 and accelerator.process_index == 0:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                accelerator.save_state(folder / "unrecognised")
            report("grace_warning", [str(w.message) for w in caught if "did not call save_state" in str(w.message)])
    accelerator.wait_for_everyone()
    accelerator.save_state(folder / "everyone")
    report("trained", flat(model))

    resumed, model, _, _ = build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed.load_state(folder / "main")
    report("resumed", flat(model))
    report("load_warnings", [str(w.message) for w in caught if "main process alone" in str(w.message)])
    resumed.wait_for_everyone()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
