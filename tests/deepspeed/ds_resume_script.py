"""Launched with 2 processes by test_deepspeed_checkpoints.py: at the ZeRO stage given on the command line, train
an epoch, save_state, train another; then a new Accelerator loads the checkpoint and trains the same epoch again.
Also save_model after training (gathered under ZeRO 3). Reports losses, weights and what the files hold."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from ds_tiny import LR, MICRO, dataset, make_model
from launching import report
from safetensors.torch import load_file
from torch import nn

from accel import Accelerator
from accel.utils import DeepSpeedPlugin


def setup(stage: int) -> tuple[Accelerator, nn.Module, object, object, object]:
    plugin = DeepSpeedPlugin(zero_stage=stage, zero3_save_16bit_model=stage == 3)
    accelerator = Accelerator(deepspeed_plugin=plugin)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
    loader = torch.utils.data.DataLoader(dataset(), batch_size=MICRO)
    return accelerator, *accelerator.prepare(model, optimizer, scheduler, loader)


def epoch(accelerator: Accelerator, model: nn.Module, optimizer: object, scheduler: object, loader: object) -> list[float]:
    losses = []
    for _, x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def main(stage: int, folder: Path) -> None:
    accelerator, *objects = setup(stage)
    epoch(accelerator, *objects)
    saved = accelerator.save_state(folder / "checkpoint")
    report("files", sorted(str(p.relative_to(saved)) for p in saved.rglob("*") if p.is_file()))
    report("losses_straight", epoch(accelerator, *objects))
    report("lr_straight", objects[2].get_last_lr())
    weights = accelerator.get_state_dict(objects[0])
    accelerator.save_model(objects[0], folder / "model")
    if accelerator.is_main_process:
        on_disk = load_file(str(folder / "model" / "model.safetensors"))
        report("saved_model_matches", sorted(on_disk) == sorted(weights)
               and all(torch.equal(on_disk[k], weights[k].contiguous()) for k in weights))
        report("weights_straight", {k: v.tolist() for k, v in weights.items()})
    accelerator, *objects = setup(stage)
    accelerator.load_state(folder / "checkpoint")
    report("losses_resumed", epoch(accelerator, *objects))
    report("lr_resumed", objects[2].get_last_lr())
    weights = accelerator.get_state_dict(objects[0])
    if accelerator.is_main_process:
        report("weights_resumed", {k: v.tolist() for k, v in weights.items()})


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
