"""A tiny MLP trained through the Accelerator on native FP8 O1/O2 (fp32 base), for the fused-step tests."""

from __future__ import annotations

from typing import Any

import torch

from accel import Accelerator, FP8RecipeKwargs


def train_tiny(
    level: str, steps: int, optimizer_kind: type[torch.optim.Optimizer] = torch.optim.AdamW, clip: bool = False
) -> tuple[list[float], Any]:
    """Losses of ``steps`` steps of Linear(64,128)-GELU-Linear(128,64) learning to flip its input, and
    the prepared optimizer. ``clip``: clip at 0.05, which binds (the weights arrive materialised)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    optimizer = optimizer_kind(model.parameters(), lr=3e-3)
    accelerator = Accelerator(
        mixed_precision="fp8", cpu=True,
        kwarg_handlers=[FP8RecipeKwargs(backend="native", optimization_level=level, base_precision="fp32")],
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    data = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(data), data.flip(1))
        accelerator.backward(loss)
        if clip:
            accelerator.clip_grad_norm_(model.parameters(), 0.05)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, optimizer
