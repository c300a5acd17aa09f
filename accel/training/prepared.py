"""PreparedObjects: the registry of what an Accelerator prepared and registered.

One list per kind, in the order prepared (a checkpoint stores them by that position), plus the
objects given to `register_for_checkpointing` and the save/load pre-hooks. Checkpointing reads
this registry, never the Accelerator's private attributes; the Accelerator's `_models`,
`_optimizers`, `_schedulers` and `_dataloaders` (read by transformers' Trainer and by published
scripts) are views of these lists.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from accel.data.loader import PreparedDataLoader
    from accel.training.optimizer import AcceleratedOptimizer
    from accel.training.scheduler import AcceleratedScheduler

SaveHook = Callable[[list[nn.Module], list[dict[str, torch.Tensor]], str], None]
"""A save_state pre-hook: (models, weights, output_dir); it may remove entries from both lists."""
LoadHook = Callable[[list[nn.Module], str], None]
"""A load_state pre-hook: (models, input_dir); it may remove models from the list."""


@dataclasses.dataclass
class PreparedObjects:
    """What was prepared, by kind, in the order prepared.

    >>> prepared = PreparedObjects()
    >>> prepared.models.append(nn.Linear(2, 2))
    >>> len(prepared.models)
    1
    """

    models: list[nn.Module] = dataclasses.field(default_factory=list)
    optimizers: list[AcceleratedOptimizer] = dataclasses.field(default_factory=list)
    schedulers: list[AcceleratedScheduler] = dataclasses.field(default_factory=list)
    dataloaders: list[PreparedDataLoader] = dataclasses.field(default_factory=list)
    registered: list[Any] = dataclasses.field(default_factory=list)
    """The objects given to `register_for_checkpointing` (each has state_dict/load_state_dict)."""
    save_hooks: OrderedDict[int, SaveHook] = dataclasses.field(default_factory=OrderedDict)
    """save_state pre-hooks by handle id (an OrderedDict: weak-referenceable, for torch's RemovableHandle)."""
    load_hooks: OrderedDict[int, LoadHook] = dataclasses.field(default_factory=OrderedDict)
    """load_state pre-hooks by handle id."""

    def forget_training_objects(self) -> None:
        """Drop the prepared models, optimizers, schedulers and dataloaders (`free_memory`); registered
        objects and hooks stay, as under Accelerate."""
        self.models.clear()
        self.optimizers.clear()
        self.schedulers.clear()
        self.dataloaders.clear()
