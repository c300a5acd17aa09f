"""Helpers shared by tests (a module, so that test files can import it by name)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from accel.tracking import GeneralTracker


def make_regression(seed: int = 0, width: int = 16) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small MLP and a fixed batch: y = a random linear function of x, plus noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, width, generator=generator)
    y = x @ torch.randn(width, 1, generator=generator) + 0.01 * torch.randn(64, 1, generator=generator)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, 1))
    return model, x, y


class Recorder(GeneralTracker):
    """A tracker that keeps what it is given: `logged` holds (values, step) for every `log` call."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[dict[str, Any], int | None]] = []

    @property
    def tracker(self) -> Any:
        return self.logged

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.logged.append((values, step))
