"""A tiny model with Linear layers of every kind the quantizer meets, for the quantization tests."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """Embedding-free MLP: fc1 -> GELU -> fc2 -> LayerNorm -> head (8 classes)."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, width)
        self.fc2 = nn.Linear(width, 32)
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.fc2(nn.functional.gelu(self.fc1(x)))))


def batch(seed: int = 0, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 32, generator=generator), torch.randint(0, 8, (n,), generator=generator)


def net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()
