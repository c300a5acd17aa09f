"""Accelerate's private lists of prepared objects, kept as views of `accelerator.prepared`.

transformers' Trainer reads `accelerator._models`, and published scripts assign it; accel's own
code reads the registry (accel.training.prepared). Assigning a view replaces that list in the
registry, so what a script assigns is what checkpoints store.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from accel.data.loader import PreparedDataLoader
from accel.training.optimizer import AcceleratedOptimizer
from accel.training.prepared import PreparedObjects
from accel.training.scheduler import AcceleratedScheduler


class PrivateViewsMixin:
    """`_models`, `_optimizers`, `_schedulers`, `_dataloaders` (settable), `_custom_objects` and the hook maps."""

    prepared: PreparedObjects

    @property
    def _models(self) -> list[nn.Module]:
        return self.prepared.models

    @_models.setter
    def _models(self, models: list[nn.Module]) -> None:
        self.prepared.models = models

    @property
    def _optimizers(self) -> list[AcceleratedOptimizer]:
        return self.prepared.optimizers

    @_optimizers.setter
    def _optimizers(self, optimizers: list[AcceleratedOptimizer]) -> None:
        self.prepared.optimizers = optimizers

    @property
    def _schedulers(self) -> list[AcceleratedScheduler]:
        return self.prepared.schedulers

    @_schedulers.setter
    def _schedulers(self, schedulers: list[AcceleratedScheduler]) -> None:
        self.prepared.schedulers = schedulers

    @property
    def _dataloaders(self) -> list[PreparedDataLoader]:
        return self.prepared.dataloaders

    @_dataloaders.setter
    def _dataloaders(self, dataloaders: list[PreparedDataLoader]) -> None:
        self.prepared.dataloaders = dataloaders

    @property
    def _custom_objects(self) -> list[Any]:
        """Accelerate's name for the objects given to register_for_checkpointing."""
        return self.prepared.registered

    @property
    def _save_state_pre_hooks(self) -> dict[int, Any]:
        return self.prepared.save_hooks

    @property
    def _load_state_pre_hooks(self) -> dict[int, Any]:
        return self.prepared.load_hooks
