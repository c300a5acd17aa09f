"""Run by test_data_parallel.py under `accel launch --num_processes 2`: train with O1 and O2 from
different initial weights and different data on each process; print whether the replicas agree."""

from __future__ import annotations

import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs


def train(level: str) -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="native", optimization_level=level)])
    torch.manual_seed(accelerator.process_index)  # different weights: preparing must make them equal
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.LayerNorm(32))
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    generator = torch.Generator().manual_seed(100 + accelerator.process_index)
    x, y = torch.randn(64, 32, generator=generator), torch.randn(64, 32, generator=generator)
    losses = []
    for _ in range(15):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    flat = torch.cat([p.detach().float().reshape(-1) for p in accelerator.unwrap_model(model).parameters()])
    copies = accelerator.gather(flat.reshape(1, -1))
    if accelerator.is_main_process:
        print(f"{level}: replicas equal {torch.equal(copies[0], copies[1])}, loss falls {losses[-1] < losses[0]}")
    accelerator.end_training()


for level in ("O1", "O2"):
    train(level)
