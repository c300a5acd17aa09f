"""What a docs snippet may assume exists: a tiny model, optimizer, dataloader, scheduler and loss.

A snippet marked `<!-- snippet: setup: from snippet_world import * -->` runs after this import, so
the docs show a training loop without the ten lines that build its objects.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = train_loader = train_dataloader = DataLoader(dataset, batch_size=8, shuffle=True)
eval_loader = eval_dataloader = DataLoader(dataset, batch_size=16)
scheduler = lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
loss_fn = nn.MSELoss()
num_epochs = 1
resuming = False


class Progress:
    """Something of the script's own to checkpoint: the epoch it is in."""

    def __init__(self) -> None:
        self.epoch = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = state["epoch"]


progress = Progress()

__all__ = [
    "DataLoader", "TensorDataset", "dataset", "eval_dataloader", "eval_loader", "loader", "loss_fn", "lr_scheduler",
    "model", "nn", "num_epochs", "optimizer", "progress", "resuming", "scheduler", "torch", "train_dataloader",
    "train_loader",
]
