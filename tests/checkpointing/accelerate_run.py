"""One small training run, written as an Accelerate script, run under Accelerate or accel by
test_from_accelerate.py (the library is chosen by the first argument: only the import differs).

    accelerate_run.py accelerate|accel save PROJECT [--bin] [--processes]
        trains epoch 0, sets project_configuration.iteration = 3 and calls save_state()
        (PROJECT/checkpoints/checkpoint_3), then trains epoch 1 on (the uninterrupted run)
    accelerate_run.py accelerate|accel resume PROJECT FOLDER
        builds the same objects, load_state(FOLDER), trains epoch 1, then save_state()

It prints one JSON line: each epoch-1 step's loss and learning rate, the final weights, the
folder of the last save, and a draw of each RNG right after saving / right after loading.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

import numpy
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if len(sys.argv) > 1 and sys.argv[1] == "accelerate":
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, set_seed
else:
    from accel import Accelerator
    from accel.utils import ProjectConfiguration, set_seed


class Progress:
    """A registered object (custom_checkpoint_0.pkl)."""

    def __init__(self) -> None:
        self.epoch = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = state["epoch"]


def draws() -> list[float]:
    return [random.random(), float(numpy.random.rand()), torch.rand(1).item()]


def build(project: str, **options: Any) -> tuple[Any, ...]:
    """(accelerator, progress, model, optimizer, loader, scheduler), prepared.

    With several processes (Accelerate's automatic naming races between them) checkpoints go to
    PROJECT/checkpoint_3 by name."""
    automatic = int(os.environ.get("WORLD_SIZE", "1")) == 1
    accelerator = Accelerator(
        gradient_accumulation_steps=2,
        project_config=ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=automatic),
        **options,
    )
    set_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # with several processes a constant rate: how often Accelerate steps a scheduler there is not checkpointing's business
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, (lambda step: 1 - step / 40) if automatic else (lambda step: 1.0))
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(x, x.sum(1, keepdim=True))
    loader = DataLoader(data, batch_size=4, shuffle=accelerator.num_processes == 1)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    return accelerator, progress, *accelerator.prepare(model, optimizer, loader, scheduler)


def main(mode: str, project: str, *rest: str) -> None:
    accelerator, progress, model, optimizer, loader, scheduler = build(project)
    automatic = accelerator.project_configuration.automatic_checkpoint_naming
    report: dict[str, Any] = {}
    if mode == "save":
        epoch(accelerator, model, optimizer, loader, scheduler)
        progress.epoch = 1
        accelerator.project_configuration.iteration = 3
        state = torch.get_rng_state(), random.getstate(), numpy.random.get_state()
        target = None if automatic else os.path.join(project, "checkpoint_3")
        report["saved"] = str(accelerator.save_state(target, safe_serialization="--bin" not in rest))
        report["draws"] = draws()
        torch.set_rng_state(state[0]), random.setstate(state[1]), numpy.random.set_state(state[2])
    else:
        accelerator.load_state(rest[0])
        state = torch.get_rng_state(), random.getstate(), numpy.random.get_state()
        report["draws"] = draws()
        torch.set_rng_state(state[0]), random.setstate(state[1]), numpy.random.set_state(state[2])
        report["progress"] = progress.epoch
    report["steps"] = epoch(accelerator, model, optimizer, loader, scheduler)
    report["weights"] = [p.detach().reshape(-1).tolist() for p in accelerator.unwrap_model(model).parameters()]
    if mode == "resume":
        report["saved"] = str(accelerator.save_state(None if automatic else os.path.join(project, "next")))
    # one write per line (print writes the text and the newline apart): the ranks' lines never interleave
    sys.stdout.write(json.dumps({"rank": accelerator.process_index, **report}) + "\n")
    sys.stdout.flush()
    # Leave the process group together: a gloo rank exiting while the other still talks to it can abort
    # (SIGABRT at exit, seen under load), which would fail the run after its report was written.
    accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def epoch(accelerator: Any, model: nn.Module, optimizer: Any, loader: Any, scheduler: Any) -> list[list[float]]:
    steps = []
    for inputs, targets in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        steps.append([loss.item(), scheduler.get_last_lr()[0]])
    return steps


if __name__ == "__main__":
    main(*sys.argv[2:])
    if sys.argv[1] == "accelerate":
        # Accelerate's processes sometimes abort at interpreter shutdown after reporting ("terminate called without
        # an active exception"): the reference run ends here. accel's run exits normally.
        os._exit(0)
