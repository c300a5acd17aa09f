"""`GradientAccumulationPlugin`: Accelerate's options for gradient accumulation, checked when built.

Accelerate's fields, defaults and meanings; frozen. Whether the Accelerator can honour a
non-default value is decided by the Accelerator, which raises for any it cannot.
"""

from __future__ import annotations

import dataclasses

from accel._validation import check_bool, check_int
from accel.kwargs_handlers.base import KwargsHandler


@dataclasses.dataclass(frozen=True)
class GradientAccumulationPlugin(KwargsHandler):
    """How gradients are accumulated (Accelerate's fields and defaults); `to_kwargs()` gives the
    fields that differ from the defaults.

    Give either `Accelerator(gradient_accumulation_plugin=...)` or `gradient_accumulation_steps=`,
    not both. Unlike Accelerate, where `num_steps=None` breaks later, None here means "the
    Accelerator's `gradient_accumulation_steps`" (its environment value, else 1).
    """

    num_steps: int | None = None
    """Micro-batches per optimizer step."""
    adjust_scheduler: bool = True
    """Accelerate's field, accepted and reported; it changes no learning rate, as in Accelerate, where a
    prepared scheduler steps only with the optimizer either way (accel/training/scheduler.py says why)."""
    sync_with_dataloader: bool = True
    """Synchronise (and step) at the end of the dataloader even mid-accumulation."""
    sync_each_batch: bool = False
    """Synchronise gradients across processes on every micro-batch (less memory, more communication)."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if self.num_steps is not None:
            check_int(f"{owner}.num_steps", self.num_steps, minimum=1, or_none=True)
        for name in ("adjust_scheduler", "sync_with_dataloader", "sync_each_batch"):
            check_bool(f"{owner}.{name}", getattr(self, name))
