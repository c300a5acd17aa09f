"""LossScaler: dynamic loss scaling with torch.amp.GradScaler, for backends other than fp16 that need it.

MS-AMP's examples scale the loss with torch's GradScaler (MS-AMP teaches its unscale kernel
about its own gradient tensors). This class keeps the scaler and counts the steps it skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel.kwargs_handlers import GradScalerKwargs


class LossScaler:
    """A torch.amp.GradScaler built from GradScalerKwargs, with the skipped-step count."""

    def __init__(self, device: torch.device, options: GradScalerKwargs) -> None:
        self.scaler = torch.amp.GradScaler(
            device.type,
            init_scale=options.init_scale,
            growth_factor=options.growth_factor,
            backoff_factor=options.backoff_factor,
            growth_interval=options.growth_interval,
            enabled=options.enabled,
        )
        self._scale = self.scaler.get_scale()
        self.skipped_steps = 0

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.scaler.scale(loss).backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        """Step unless gradients hold inf/NaN; update the scale. False when the step was skipped."""
        self.scaler.step(optimizer) if closure is None else self.scaler.step(optimizer, closure)
        self.scaler.update()
        scale = self.scaler.get_scale()
        stepped = not scale < self._scale  # update() lowers the scale only after a skipped step
        self._scale = scale
        self.skipped_steps += not stepped
        return stepped

    def stats(self) -> dict[str, float]:
        return {"loss_scale": self._scale, "skipped_steps": self.skipped_steps}

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state["skipped_steps"])
        self._scale = self.scaler.get_scale()
