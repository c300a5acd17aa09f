"""The native backend's optimizer step as torch's GradScaler sees it (base_precision='fp16')."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel.backends.native_fp8.compact import CompactGroup
from accel.backends.native_fp8.levels import OptimizationLevel


class LevelStep:
    """What torch's GradScaler unscales and steps for the native backend (base_precision='fp16').

    It sees the optimizer's param_groups (the materialised FP8 gradients among them) and, when
    no gradient held inf/NaN, its `step` runs the optimization level, as an unscaled step would.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, group: CompactGroup | None, level: OptimizationLevel | None) -> None:
        self.optimizer = optimizer
        self.group = group
        self.level = level
        self.unscaled = False

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def step(self, closure: Callable[[], Any] | None = None) -> None:
        if self.group is not None and self.level is not None:  # compact parameters exist only under O1/O2
            self.level.step(self.optimizer, self.group)
        else:
            self.optimizer.step(closure) if closure is not None else self.optimizer.step()
