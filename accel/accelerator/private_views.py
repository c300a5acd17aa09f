"""Accelerate's private lists of prepared objects, kept as views of `accelerator.prepared`.

transformers' Trainer reads `accelerator._models`, and published scripts assign it; accel's own
code reads the registry (accel.training.prepared). Assigning a view replaces that list in the
registry, so what a script assigns is what checkpoints store.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

from torch import nn

from accel.data.loader import PreparedDataLoader
from accel.training.optimizer import AcceleratedOptimizer
from accel.training.prepared import PreparedObjects
from accel.training.scheduler import AcceleratedScheduler

T = TypeVar("T")


class _RegistryList(Generic[T]):
    """A data descriptor: `accelerator._<field>` reads and replaces `accelerator.prepared.<field>`."""

    def __init__(self, field: str) -> None:
        self.field = field

    @overload
    def __get__(self, accelerator: None, owner: type) -> _RegistryList[T]: ...
    @overload
    def __get__(self, accelerator: PrivateViewsMixin, owner: type) -> list[T]: ...
    def __get__(self, accelerator: PrivateViewsMixin | None, owner: type) -> list[T] | _RegistryList[T]:
        if accelerator is None:
            return self
        return getattr(accelerator.prepared, self.field)

    def __set__(self, accelerator: PrivateViewsMixin, value: list[T]) -> None:
        if not isinstance(value, list):
            raise TypeError(
                f"accelerator._{self.field} = {value!r}: give a list (it replaces accelerator.prepared.{self.field}, "
                f"which checkpoints store), not {type(value).__name__}."
            )
        setattr(accelerator.prepared, self.field, value)


class PrivateViewsMixin:
    """`_models`, `_optimizers`, `_schedulers`, `_dataloaders` (settable), `_custom_objects` and the hook maps."""

    prepared: PreparedObjects

    _models: _RegistryList[nn.Module] = _RegistryList("models")
    _optimizers: _RegistryList[AcceleratedOptimizer] = _RegistryList("optimizers")
    _schedulers: _RegistryList[AcceleratedScheduler] = _RegistryList("schedulers")
    _dataloaders: _RegistryList[PreparedDataLoader] = _RegistryList("dataloaders")

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
