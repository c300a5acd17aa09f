"""Accelerate's configuration objects for the dataloaders and for gradient accumulation.

`DataLoaderConfiguration` and `GradientAccumulationPlugin` have Accelerate's fields, defaults
and meanings, and check their values: a value of the wrong kind raises ValueError naming the
field, the value and what is accepted. A DataLoaderConfiguration can be changed after it is built,
as Accelerate's (each assignment is checked the same way); the plugin is frozen. Whether the Accelerator can
honour a non-default value is decided by the Accelerator, which raises for any it cannot.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from accel.kwargs_handlers.base import KwargsHandler


def _check_bool(owner: str, name: str, value: Any, *, optional: bool = False) -> None:
    if isinstance(value, bool) or (optional and value is None):
        return
    accepted = "True, False or None" if optional else "True or False"
    raise ValueError(f"{owner}({name}={value!r}) is not accepted; accepted values: {accepted}.")


def _check_int(owner: str, name: str, value: Any, *, minimum: int | None, meaning: str) -> None:
    if value is None:
        return
    if not isinstance(value, bool) and isinstance(value, int) and (minimum is None or value >= minimum):
        return
    bound = "an int" if minimum is None else f"an int >= {minimum}"
    raise ValueError(f"{owner}({name}={value!r}) is not accepted; accepted values: {bound} ({meaning}), or None.")


_LOADER_FLAGS = ("split_batches", "even_batches", "use_seedable_sampler", "non_blocking", "use_stateful_dataloader")


@dataclasses.dataclass
class DataLoaderConfiguration:
    """How `accelerator.prepare` shards and feeds dataloaders (Accelerate's fields and defaults)."""

    split_batches: bool = False
    """True: each batch the dataloader yields is split over the processes (its size must be a
    multiple of the number of processes). False: every process gets batches of the script's size."""
    dispatch_batches: bool | None = None
    """True: only the main process iterates the dataloader and sends each process its part.
    None: True for an IterableDataset, False otherwise."""
    even_batches: bool = True
    """True: when the samples do not divide evenly, samples from the start of the dataset are
    repeated so that every process gets the same number of batches."""
    use_seedable_sampler: bool = False
    """Shuffle with a sampler seeded from `data_seed` (or torch's seed), reproducible across runs."""
    data_seed: int | None = None
    """The seed of the seedable sampler; None uses torch's current default seed."""
    non_blocking: bool = False
    """Copy batches to the device with `non_blocking=True` (pair with `pin_memory=True`)."""
    use_stateful_dataloader: bool = False
    """Back prepared dataloaders by torchdata's StatefulDataLoader."""

    def __setattr__(self, name: str, value: Any) -> None:
        """Check a field's value whenever it is set (the dataclass's __init__ sets each one too)."""
        owner = type(self).__name__
        if name in _LOADER_FLAGS:
            _check_bool(owner, name, value)
        elif name == "dispatch_batches":
            _check_bool(owner, name, value, optional=True)
        elif name == "data_seed":
            _check_int(owner, name, value, minimum=None, meaning="the sampler's seed")
        super().__setattr__(name, value)

    def non_default_fields(self) -> dict[str, Any]:
        """The fields whose value differs from the default (what an Accelerator must honour)."""
        default = type(self)()
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {name: value for name, value in values.items() if value != getattr(default, name)}


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
    """Step the scheduler once per real optimizer step (as accel always does) rather than per micro-batch."""
    sync_with_dataloader: bool = True
    """Synchronise (and step) at the end of the dataloader even mid-accumulation."""
    sync_each_batch: bool = False
    """Synchronise gradients across processes on every micro-batch (less memory, more communication)."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        _check_int(owner, "num_steps", self.num_steps, minimum=1, meaning="micro-batches per optimizer step")
        for name in ("adjust_scheduler", "sync_with_dataloader", "sync_each_batch"):
            _check_bool(owner, name, getattr(self, name))
