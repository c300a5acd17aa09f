"""`DataLoaderConfiguration`: Accelerate's configuration object for prepared dataloaders.

Accelerate's fields, defaults and meanings, with each value checked (accel._validation: a value of
the wrong kind raises ArgumentTypeError, a ValueError and a TypeError, naming the field, the value
and what is accepted). It can be changed after it is built, as Accelerate's (each assignment is
checked the same way). Whether the Accelerator can
honour a non-default value is decided by the Accelerator, which raises for any it cannot.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from accel._validation import check_bool, check_int, check_optional_bool

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
    """`load_state` puts each prepared dataloader back at the batch after the last one it yielded
    (Accelerate does this with torchdata's StatefulDataLoader; accel needs no torchdata). False: the
    loader starts a fresh epoch after `load_state`, and the script skips what was trained."""

    def __setattr__(self, name: str, value: Any) -> None:
        """Check a field's value whenever it is set (the dataclass's __init__ sets each one too)."""
        argument = f"{type(self).__name__}.{name}"
        if name in _LOADER_FLAGS:
            check_bool(argument, value)
        elif name == "dispatch_batches":
            check_optional_bool(argument, value)
        elif name == "data_seed" and value is not None:
            check_int(argument, value, or_none=True)
        super().__setattr__(name, value)

    def non_default_fields(self) -> dict[str, Any]:
        """The fields whose value differs from the default (what an Accelerator must honour)."""
        default = type(self)()
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {name: value for name, value in values.items() if value != getattr(default, name)}
