"""A tiny transformer-shaped model, its data and a plain one-process training loop: the reference
that the sharded runs are compared with."""

from __future__ import annotations

import torch
from torch import nn

GLOBAL_BATCH = 8
WIDTH = 16


class Block(nn.Module):
    """A residual MLP block: the unit `transformer_cls_names_to_wrap=['Block']` shards."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class TinyNet(nn.Module):
    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_model(seed: int = 0, width: int = WIDTH) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(width)


def batch(step: int, rank: int = 0, world: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s global batch, or process `rank`'s equal part of it."""
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 8, generator=generator)
    y = torch.randn(GLOBAL_BATCH, 4, generator=generator)
    part = GLOBAL_BATCH // world
    return x[rank * part:(rank + 1) * part], y[rank * part:(rank + 1) * part]


def optimizer_for(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x).float(), y)


def train_reference(steps: int, max_norm: float = 0.5) -> dict[str, list]:
    """One process, the global batch: losses, gradient norms (before clipping) and final weights."""
    model = make_model()
    optimizer = optimizer_for(model)
    losses, norms = [], []
    for step in range(steps):
        x, y = batch(step)
        loss = loss_of(model, x, y)
        loss.backward()
        norms.append(nn.utils.clip_grad_norm_(model.parameters(), max_norm).item())
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return {"losses": losses, "norms": norms, "weights": as_lists(model.state_dict())}


def as_lists(state: dict[str, torch.Tensor]) -> dict[str, list]:
    """A state dict as JSON-able nested lists (float32 values round-trip exactly through JSON)."""
    return {name: tensor.float().tolist() for name, tensor in state.items()}
