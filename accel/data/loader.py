"""PreparedDataLoader: batches on the right device, the end of an epoch made visible, a position
that a checkpoint can save and resume from, with several processes this process's part of the
data (see sharding.py and iterable_sharding.py), and the options of a DataLoaderConfiguration
(see loader_options.py).

It is a `torch.utils.data.DataLoader` (a subclass, as Accelerate's DataLoaderShard) that wraps the
loader it iterates: `dataset`, `batch_size`, `sampler`, `batch_sampler`, `num_workers`,
`collate_fn`, `drop_last`, ... are read from that loader (this process's rebuilt one), and
DataLoader.__init__ never runs on it, so DataLoader's guard against setting those after init does
not apply (set them on `prepared.loader` if you must).

Epochs: the prepared loader numbers its epochs 0, 1, 2, ... as they start. `set_epoch(e)` (Accelerate's
DataLoaderShard.set_epoch) makes the next epoch to start number e, and the numbering goes on from
there. The number decides the order of the seedable sampler, is passed to the `set_epoch` of the
user's dataset, sampler and batch sampler as each epoch starts, and to a DistributedSampler the
script made. Checkpoints save the running epoch's number (between epochs: the next one's) and the
position in it. `load_state` restores them only for a loader prepared with
`DataLoaderConfiguration(use_stateful_dataloader=True)`; otherwise the loader stays as prepared
(its next pass is epoch 0 from its start, as under Accelerate). After a restored position, a
script that calls `set_epoch(e)` with the saved epoch's number keeps it, with another number it
starts epoch e from its start (with a warning naming both).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from accel._tree import map_tensors
from accel.data.configuration import DataLoaderConfiguration
from accel.data.dispatching import Dispatching, SliceFn, dispatch_loader
from accel.data.iterable_sharding import IterableDatasetShard, shard_iterable_loader
from accel.data.loader_options import (
    check_dataloader_config,
    check_even_batches_apply,
    dispatches,
    epoch_targets,
    given_batch_size,
    seed_loader,
)
from accel.data.position import adopt_generator, apply_rng, capture_rng, check_position, generators
from accel.data.sharding import Sharding, shard_loader
from accel.data.skipping import SkippedEpochStart
from accel.distributed.operations import Keep
from accel.distributed.process_state import ProcessState
from accel.training.gradient_state import GradientState

_END = object()
"""Returned by next() on an exhausted iterator."""


class _Epoch:
    """One running pass over the loader: its number, how many batches it has yielded, and the RNG
    states from just before it started (which, replayed, give the same shuffling)."""

    __slots__ = ("batches", "index", "rng")

    def __init__(self, index: int, rng: dict[str, Any]) -> None:
        self.index = index
        self.batches = 0
        self.rng = rng


class PreparedDataLoader(DataLoader):
    """Iterates the user's DataLoader, moving each batch to the device.

    It looks one batch ahead so that the last batch of an epoch is known while it is being
    used: gradient accumulation then syncs on it instead of carrying a partial window into
    the next epoch.

    `state_dict()` records the position in the running epoch; after `load_state_dict()`, the
    next iteration continues that epoch at the next batch, in the same order (see
    docs/checkpoints.md). `load_state` calls it only with `use_stateful_dataloader=True`.

    With several processes (`state`), `loader` is rebuilt so that each process iterates its own
    part of every epoch; `self.loader` is that rebuilt loader and `len()` counts this process's
    batches. `batch_transform` (None: none) changes each batch after it is placed (sequence parallelism
    gives each rank its slice: accel.parallel.sequence). `config` (None: the defaults) chooses how the
    batches are split, whether shuffling is seeded per epoch, and whether batches move to the device
    with `non_blocking`.

    `skip_first_batches(n)` gives a view of this loader whose next epoch starts at batch n of
    that epoch (see skipping.py and docs/checkpoints.md).

    `set_epoch(e)`, `end_of_dataloader`, `remainder`, `total_batch_size`, `total_dataset_length`:
    Accelerate's DataLoaderShard attributes (module docstring).
    """

    _is_accelerate_prepared = True
    """What libraries check to avoid preparing a loader twice (Accelerate sets it on what it prepares)."""

    def __new__(cls, loader: Any = None, *args: Any, **kwargs: Any) -> PreparedDataLoader:
        """A loader prepared already is given back as it is (never wrapped twice)."""
        if isinstance(loader, PreparedDataLoader):
            return loader
        return super().__new__(cls)

    def __init__(
        self,
        loader: DataLoader[Any],
        device: torch.device,
        gradients: GradientState,
        place: bool,
        state: ProcessState | None = None,
        *,
        config: DataLoaderConfiguration | None = None,
        layout: tuple[int, int] | None = None,
        slice_fn: SliceFn | None = None,
        batch_transform: Callable[[Any], Any] | None = None,
    ):
        if loader is self:  # prepared already (see __new__)
            return
        config = DataLoaderConfiguration() if config is None else config
        check_dataloader_config(config)
        state = state or ProcessState(device=device)
        layout = layout or (state.data_parallel_size, state.data_parallel_index)
        seeded, self._seeded = seed_loader(loader, config)
        self.loader: DataLoader[Any]
        self._sharding: Sharding
        dispatched = dispatches(config, loader, place)
        check_even_batches_apply(config, layout[0], dispatched or isinstance(seeded.dataset, IterableDataset))
        if dispatched:
            self.loader, self._sharding = dispatch_loader(seeded, state, config.split_batches, slice_fn)
        elif isinstance(seeded.dataset, IterableDataset):
            self.loader, self._sharding = shard_iterable_loader(seeded, state, config, layout)
        else:
            self.loader, self._sharding = shard_loader(seeded, state, config, layout)
        self.config = config
        self.ending = False
        """True while the epoch's last batch is in use (gather_for_metrics then drops padding)."""
        self.remainder = -1
        """Real samples in the epoch's last global batch (Accelerate's meaning, see GradientState.remainder)."""
        self.device = device
        self._transform = batch_transform
        self._gradients = gradients
        self._place = place and device.type != "cpu"
        self._non_blocking = config.non_blocking
        size = given_batch_size(loader)
        split = config.split_batches and layout[0] > 1
        self._total_batch_size = None if size is None else size if split else size * layout[0]
        self._drop_last = bool(loader.drop_last)
        self._epoch_targets = epoch_targets(loader)
        self._epochs_started = 0
        self._running: list[_Epoch] = []
        self._resume: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator of batches, not torch's _BaseDataLoaderIter
        return self._iterate(None)

    def skip_first_batches(self, num_batches: int = 0) -> SkippedEpochStart:
        """This loader, with its next epoch starting at batch `num_batches` of that epoch (counted from
        the epoch's start, also when load_state has positioned it inside the epoch); later epochs are whole.

        Example: `for batch in accelerator.skip_first_batches(loader, resume_step): ...`"""
        return SkippedEpochStart(self, num_batches)

    @contextlib.contextmanager
    def override_even_batches(self, even_batches: bool) -> Iterator[None]:
        """Inside the block, the processes' parts follow `even_batches` instead of the configured value
        (what `accelerator.join_uneven_inputs(..., even_batches=...)` uses)."""
        with self._sharding.override_even_batches(even_batches):
            yield

    def _iterate(self, skip: int | None) -> Iterator[Any]:
        """One epoch; `skip`: the batch it starts at (None: the loaded position, or its start)."""
        loaded = self._resume
        if loaded is not None and _ended(loaded["batch"], self._length(), skip):
            self._finish_loaded_epoch()  # it has no batch left: this pass (and its skip) is the epoch after it
        index = self._epochs_started if self._resume is None else self._resume["epoch"]
        self._sharding.start_epoch(index)
        self._apply_epoch(index)
        self.remainder = self._initial_remainder()
        epoch = _Epoch(index, capture_rng(self.loader))
        batches, current = self._open(epoch, skip)
        self._epochs_started = epoch.index + 1
        if current is _END:
            return
        self._running.append(epoch)
        self._gradients._add_dataloader(self)
        try:
            for upcoming in batches:
                epoch.batches += 1
                yield self._deliver(current)
                current = upcoming
            epoch.batches += 1
            self.ending = True
            self.remainder = self._sharding.ending_remainder(self.remainder)
            yield self._deliver(current)
        finally:
            self.ending = False
            self._gradients._remove_dataloader(self)
            self._running.remove(epoch)

    def _deliver(self, batch: Any) -> Any:
        """The batch as the script gets it: on the device (and this rank's slice of its sequences, under sp)."""
        if self._place:
            batch = map_tensors(lambda t: t.to(self.device, non_blocking=self._non_blocking), batch)
        return batch if self._transform is None else self._transform(batch)

    def set_epoch(self, epoch: int) -> None:
        """Make the next epoch to start number `epoch` (Accelerate's DataLoaderShard.set_epoch; see the
        module docstring for how it decides the order and meets checkpoints)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"set_epoch(epoch={epoch!r}) is not accepted: give an int >= 0.")
        resume = self._resume
        if resume is not None and resume["epoch"] != epoch:
            warnings.warn(
                f"set_epoch({epoch}) after load_state: the checkpoint left this dataloader at batch {resume['batch']} "
                f"of epoch {resume['epoch']}; epoch {epoch} will start from its beginning instead. Call "
                f"set_epoch({resume['epoch']}) (or not at all) to resume where the checkpoint was taken.",
                stacklevel=2,
            )
            self._resume = None
        self._epochs_started = epoch
        self._apply_epoch(epoch)

    def _apply_epoch(self, epoch: int) -> None:
        """Pass the epoch number to the seedable sampler and to the user's objects with a set_epoch."""
        if self._seeded is not None:
            self._seeded.set_epoch(epoch)
        for target in self._epoch_targets:
            target.set_epoch(epoch)

    @property
    def iteration(self) -> int:
        """The running epoch's number (between epochs: the next one's); Accelerate's DataLoaderShard.iteration."""
        return self._running[-1].index if self._running else self._epochs_started

    @property
    def gradient_state(self) -> GradientState:
        """The GradientState this loader tells where an epoch ends (Accelerate's DataLoaderShard.gradient_state)."""
        return self._gradients

    @property
    def dispatches(self) -> bool:
        """True when process 0 reads the batches and sends each process its part (`dispatch_batches`)."""
        return isinstance(self._sharding, Dispatching)

    @property
    def end_of_dataloader(self) -> bool:
        """True while the epoch's last batch is in use (Accelerate's name for `ending`)."""
        return self.ending

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step over all processes: the DataLoader's batch size (that of its batch sampler, or of
        the BatchSampler given as its sampler), times the processes unless `split_batches`; None without one."""
        return self._total_batch_size

    @property
    def total_dataset_length(self) -> int:
        """len() of the user's dataset (its `total_length` when it has one, as Accelerate)."""
        dataset = self.loader.dataset
        dataset = dataset.dataset if isinstance(dataset, IterableDatasetShard) else dataset
        total = getattr(dataset, "total_length", None)
        # a dataset without len raises TypeError here, as Accelerate's
        return total if isinstance(total, int) else len(dataset)  # type: ignore[arg-type]  # TypeError if unsized

    def _initial_remainder(self) -> int:
        """Accelerate's remainder as an epoch starts (DataLoaderStateMixin.begin): -1 when the DataLoader
        drops its last batch; else the length of the dataset this process's loader reads (an IterableDatasetShard's
        own, padded, length) modulo the batch size of its batch sampler times the processes it is split over
        (-1 when either is unknown). Dispatched batches: -1 until the last batch."""
        if self._drop_last or self._sharding.dispatches:
            return -1
        loader = self.loader
        holder = loader.sampler if isinstance(loader.sampler, BatchSampler) else loader.batch_sampler
        size = getattr(holder, "batch_size", None)
        if not isinstance(size, int) or size <= 0:
            return -1
        size = size if getattr(holder, "split_batches", False) else size * getattr(holder, "num_processes", 1)
        try:
            total = getattr(loader.dataset, "total_dataset_length", None)
            return int((len(loader.dataset) if total is None else total) % size)  # type: ignore[arg-type]  # TypeError if unsized
        except TypeError:
            return -1

    def _open(self, epoch: _Epoch, skip: int | None) -> tuple[Iterator[Any], Any]:
        """A fresh iterator over the loader (without its first `skip` batches) and its first batch,
        or, after `load_state_dict`, the iterator of the saved epoch moved past the batches it had
        already yielded (or past the first `skip`, when given)."""
        resume, self._resume = self._resume, None
        if resume is None:
            epoch.batches = skip or 0
            batches = self._sharding.open(self.loader, skip or 0)
            return batches, next(batches, _END)
        # Replay the saved epoch from the RNG states it started with, then put back the RNG state
        # load_state restored, so that the skipped batches leave no trace in it.
        restored = torch.get_rng_state()
        epoch.index, epoch.rng = resume["epoch"], resume["rng"]
        epoch.batches = resume["batch"] if skip is None else skip
        apply_rng(self.loader, epoch.rng)
        try:
            batches = self._sharding.open(self.loader, 0)
            for _ in range(epoch.batches):
                if next(batches, _END) is _END:
                    if skip is not None:  # asked to skip past the end: an empty epoch, as Accelerate's
                        return batches, _END
                    raise ValueError(
                        f"the checkpoint's dataloader position is batch {epoch.batches} of epoch "
                        f"{epoch.index}, but this DataLoader ended before it: its dataset or batch size is not "
                        "the one the checkpoint was saved with. Build the DataLoader as in the saved run."
                    )
            return batches, next(batches, _END)
        finally:
            torch.set_rng_state(restored)

    def _finish_loaded_epoch(self) -> None:
        """Run the loaded epoch, which has no batch left, to its end without loading any samples, so that
        its generators advance as in the run that saved it; the next iteration starts the next epoch."""
        resume, self._resume = self._resume, None
        assert resume is not None
        restored = torch.get_rng_state()
        self._sharding.start_epoch(resume["epoch"])
        self._apply_epoch(resume["epoch"])
        apply_rng(self.loader, resume["rng"])
        try:
            for _ in self._sharding.open(self.loader, resume["batch"]):
                pass
        finally:
            torch.set_rng_state(restored)
        self._epochs_started = resume["epoch"] + 1

    def __len__(self) -> int:
        return self._sharding.length(self.loader)

    def _length(self) -> float:
        """len(self), or infinity when there is none (an IterableDataset without __len__)."""
        try:
            return len(self)
        except TypeError:
            return float("inf")

    def gathered_rows_to_keep(self) -> Keep:
        """While the epoch's last batch is in use: which rows of its gather `gather_for_metrics` keeps (the
        first n, as Accelerate: n is the loader's `remainder` when above 0), or None for all of them."""
        if not self._running or not self.ending:
            return None
        return self._sharding.keep(self._running[-1].batches, self.remainder)

    def state_dict(self) -> dict[str, Any]:
        """The position: `epoch` (0-based; the next one when no epoch is running), `batch` (batches
        yielded in it), and `rng`: the RNG states the running epoch started from; between epochs,
        None, or, when torch.Generators decide the order, their states ('torch' None)."""
        if self._resume is not None:  # loaded but not iterated yet: still at the loaded position
            return dict(self._resume)
        if not self._running:
            found = generators(self.loader)
            rng = {"torch": None, "generators": [g.get_state() for g in found]} if found else None
            return {"epoch": self._epochs_started, "batch": 0, "rng": rng}
        epoch = self._running[-1]
        return {"epoch": epoch.index, "batch": epoch.batches, "rng": epoch.rng}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position from `state_dict()`: the next iteration continues the saved epoch
        with the batch after the last one it yielded (when that was the epoch's last batch, the
        next iteration is the next epoch, whole); a position between epochs puts the generators
        back as the next epoch will find them."""
        rng = state.get("rng") if isinstance(state, dict) else None
        if isinstance(rng, dict) and isinstance(rng.get("generators"), list):
            adopt_generator(self.loader, len(rng["generators"]))
        check_position(state, len(generators(self.loader)))
        self._epochs_started = state["epoch"]
        rng = state["rng"]
        if rng is not None and rng["torch"] is None:  # between epochs
            for generator, generator_state in zip(generators(self.loader), rng["generators"]):
                generator.set_state(generator_state)
            rng = None
        self._resume = dict(state) if rng is not None else None

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"PreparedDataLoader({self.loader!r}, device={self.device})"


def _ended(position: int, length: float, skip: int | None) -> bool:
    """Whether a pass after a loaded `position` is the next epoch: the loaded epoch (of `length`
    batches) yielded its last batch, and the pass does not skip back into it. (A position past the
    end without a skip is left to _open, which reports the mismatched DataLoader.)"""
    if skip is None:
        return position == length
    return skip < position >= length
