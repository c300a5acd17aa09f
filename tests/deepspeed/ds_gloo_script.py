"""Launched with 2 processes by test_deepspeed_training.py: ZeRO 3 on the CPU (gloo) through the Accelerator,
where DeepSpeed's coalesced gathers go wrong unless accel has it gather one parameter at a time. Trains 60 SGD
steps (each process on its own rows) and gathers the weights 100 times; reports the losses, the weights and how
many gathers differed from the first."""

from __future__ import annotations

import torch
from launching import report
from torch import nn

from accel import Accelerator
from accel.utils import DeepSpeedPlugin

STEPS, ROWS, LR = 60, 64, 1e-2


def make_model() -> nn.Module:
    torch.manual_seed(0)
    hidden = [nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(4)]
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), *hidden, nn.Linear(64, 1))


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Process `rank`'s rows at `step` (the one-process reference concatenates both processes')."""
    x = torch.randn(ROWS, 16, generator=torch.Generator().manual_seed(1000 * step + rank))
    return x, x.sum(dim=1, keepdim=True).sin()


def main() -> None:
    plugin = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": ROWS})
    accelerator = Accelerator(deepspeed_plugin=plugin)
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=LR))
    losses = []
    for step in range(STEPS):
        x, y = batch(step, accelerator.process_index)
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    first = accelerator.get_state_dict(model)
    differing = 0
    for _ in range(100):
        again = accelerator.get_state_dict(model)
        differing += any(not torch.equal(again[k], first[k]) for k in first)
    report("losses", losses)
    if accelerator.is_main_process:
        report("weights", {k: v.tolist() for k, v in first.items()})
        report("differing_gathers", differing)


if __name__ == "__main__":
    main()
