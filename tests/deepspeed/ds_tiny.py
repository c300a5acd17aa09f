"""The tiny model, data and one-process reference the DeepSpeed tests compare against."""

from __future__ import annotations

import torch
from torch import nn

ROWS, FEATURES, MICRO = 16, 8, 4
LR = 1e-2


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, FEATURES, generator=generator)
    return x, x.sum(dim=1, keepdim=True).sin()


def dataset() -> torch.utils.data.TensorDataset:
    x, y = data()
    return torch.utils.data.TensorDataset(torch.arange(ROWS), x, y)


def reference(epochs: int, world: int = 2, clip: float = 0.0) -> dict[str, object]:
    """One process, each step on the global batch (every process's micro-batch together), plain torch AdamW."""
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    x, y = data()
    losses = []
    for _ in range(epochs):
        for start in range(0, ROWS, MICRO * world):
            loss = nn.functional.mse_loss(model(x[start:start + MICRO * world]), y[start:start + MICRO * world])
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return {"losses": losses, "weights": {k: v.tolist() for k, v in model.state_dict().items()}}
