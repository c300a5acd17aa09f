"""A model for `accel bench --model examples/bench_model.py:make`: the hook `accel bench` calls.

`make()` takes no arguments and returns `(model, batch_fn)` or `(model, batch_fn, loss_fn)`:
the model in fp32 on the CPU, a function that returns the `(inputs, targets)` of a step, and
optionally the loss (by default cross-entropy against integer targets). Here: a small MLP that
regresses a fixed random linear map, so the loss is the mean squared error.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

WIDTH = 64
BATCH = 256


def make() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]], Callable[..., torch.Tensor]]:
    """The model, the batch of each step, and the loss."""
    model = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
    target_map = torch.randn(WIDTH, WIDTH, generator=torch.Generator().manual_seed(0)) / WIDTH**0.5

    def batch_fn(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1 + step))
        return inputs, inputs @ target_map

    return model, batch_fn, F.mse_loss
