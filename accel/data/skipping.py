"""`skip_first_batches`: a dataloader that leaves out the first batches of an epoch (to resume mid-epoch).

Accelerate's meaning: the result yields, on every pass, the batches of the original from
number `num_batches` on, and its `len()` is shorter by `num_batches`. Scripts use it for the
first epoch after resuming and the original dataloader afterwards.

* A plain `torch.utils.data.DataLoader` over a map-style dataset gives a new DataLoader with the
  same settings whose batch sampler drops the first batches, so the skipped samples are never
  loaded. Over an IterableDataset, a DataLoader that reads and drops them.
* accel's prepared dataloader gives a `SkippedEpochStart`: a view of that same loader whose
  next epoch starts at batch `num_batches`, counted from the epoch's start, and whose later
  epochs are whole. By default `load_state` leaves the loader as prepared (a fresh epoch, as
  under Accelerate), so a resuming script skips exactly what it asks. With
  `DataLoaderConfiguration(use_stateful_dataloader=True)` `load_state` positions the loader
  inside the saved epoch, and skipping still counts from that epoch's start: a script that also
  calls `skip_first_batches(loader, resume_step)` sees each batch once, as Accelerate's by_feature
  checkpointing example does with a stateful loader (which it then skips by not skipping). Its
  position is still the prepared loader's: checkpoints and `gather_for_metrics` go on working.
* Another object with its own `skip_first_batches(num_batches)` method decides itself.
* Any other iterable with a length: an iterable that reads and drops the first batches.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, IterableDataset, Sampler

from accel.data.loader_options import loader_options


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """A dataloader like `dataloader` without its first `num_batches` batches (see the module docstring)."""
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ValueError(f"skip_first_batches(num_batches={num_batches!r}) is not accepted: give an int >= 0.")
    own = getattr(type(dataloader), "skip_first_batches", None)
    if callable(own):
        return dataloader.skip_first_batches(num_batches)
    if isinstance(dataloader, DataLoader):
        return skipping_loader(dataloader, num_batches)
    if not isinstance(dataloader, Iterable):
        raise TypeError(
            f"skip_first_batches takes a dataloader (an iterable of batches), not {type(dataloader).__name__}."
        )
    return SkippedBatches(dataloader, num_batches)


def skipping_loader(loader: DataLoader[Any], num_batches: int) -> DataLoader[Any]:
    """A DataLoader like `loader` (same settings, same sampler and generator, so the same order) that
    leaves out the first `num_batches` batches of each pass."""
    settings = loader_options(loader)
    if isinstance(loader.dataset, IterableDataset):
        return SkipDataLoader(
            loader.dataset, skip_batches=num_batches, batch_size=loader.batch_size, drop_last=loader.drop_last, **settings
        )
    if loader.batch_sampler is None:  # batch_size=None: the sampler's items are the batches
        sampler = SkipBatchSampler(loader.sampler, num_batches)
        return DataLoader(loader.dataset, sampler=sampler, batch_size=None, **settings)
    return DataLoader(loader.dataset, batch_sampler=SkipBatchSampler(loader.batch_sampler, num_batches), **settings)


class SkipBatchSampler(BatchSampler):
    """A batch sampler that yields the batches of `batch_sampler` from number `skip_batches` on."""

    def __init__(self, batch_sampler: Sampler[Any] | Iterable[Any], skip_batches: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.batch_sampler), self.skip_batches, None)

    @property
    def total_length(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]  # TypeError for an unsized one, as len() of it

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip_batches)  # type: ignore[arg-type]  # as total_length


class SkipDataLoader(DataLoader[Any]):
    """A DataLoader that drops its first `skip_batches` batches on every pass (Accelerate's class; what
    skip_first_batches builds for an IterableDataset). `use_stateful_dataloader=True` is refused: this
    plain DataLoader keeps no position that a checkpoint could restore (a prepared loader does)."""

    def __init__(self, dataset: Any, skip_batches: int = 0, use_stateful_dataloader: bool = False, **kwargs: Any) -> None:
        if use_stateful_dataloader:
            raise ValueError(
                "SkipDataLoader(use_stateful_dataloader=True) is not supported: a SkipDataLoader is a plain DataLoader "
                "with no position that load_state could restore. Leave it out, or prepare the DataLoader with "
                "DataLoaderConfiguration(use_stateful_dataloader=True) and call skip_first_batches on the prepared one."
            )
        super().__init__(dataset, **kwargs)
        self.skip_batches = skip_batches

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # an islice, not a _BaseDataLoaderIter
        return itertools.islice(super().__iter__(), self.skip_batches, None)

    def __len__(self) -> int:
        return max(0, super().__len__() - self.skip_batches)


class SkippedBatches:
    """An iterable yielding the items of `batches` from number `skip_batches` on, on every pass."""

    def __init__(self, batches: Iterable[Any], skip_batches: int = 0) -> None:
        self.batches = batches
        self.skip_batches = skip_batches

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.batches), self.skip_batches, None)

    def __len__(self) -> int:
        return max(0, len(self.batches) - self.skip_batches)  # type: ignore[arg-type]  # TypeError when unsized, as len()

    def __getattr__(self, name: str) -> Any:
        if name == "batches":
            raise AttributeError(name)
        return getattr(self.batches, name)


class SkippedEpochStart:
    """What `skip_first_batches(prepared, n)` returns for a prepared dataloader: iterating it starts
    an epoch of `prepared` at batch `n` of that epoch (see the module docstring); later passes are
    whole epochs. Everything else (len excepted) is the prepared loader's."""

    def __init__(self, prepared: Any, num_batches: int) -> None:
        if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
            raise ValueError(f"skip_first_batches(num_batches={num_batches!r}) is not accepted: give an int >= 0.")
        self.prepared = prepared
        self.skip_batches = num_batches
        self._skipping = num_batches
        """The skip of the pass to come or under way (0 once a later pass has begun)."""
        self._passes = 0

    def __iter__(self) -> Iterator[Any]:
        if self._passes == 0:
            self._passes = 1
            return self.prepared._iterate(self.skip_batches)
        self._passes += 1
        self._skipping = 0
        return self.prepared._iterate(None)

    def __len__(self) -> int:
        """Batches of the pass to come (or under way): the loader's, less those skipped (Accelerate's len)."""
        return max(0, len(self.prepared) - self._skipping)

    def skip_first_batches(self, num_batches: int = 0) -> SkippedEpochStart:
        """Skip `num_batches` more at the start of the next epoch (more than this view's, if it has not begun)."""
        return SkippedEpochStart(self.prepared, self._skipping * (self._passes == 0) + num_batches)

    def __getattr__(self, name: str) -> Any:
        if name == "prepared":
            raise AttributeError(name)
        return getattr(self.prepared, name)

    def __repr__(self) -> str:
        return f"SkippedEpochStart({self.prepared!r}, num_batches={self.skip_batches})"
