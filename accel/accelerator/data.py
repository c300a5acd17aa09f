"""PreparedDataLoader: batches on the right device, the end of an epoch made visible, a position
that a checkpoint can save and resume from, with several processes this process's part of the
data (see sharding.py), and the options of a DataLoaderConfiguration (see data_config.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from accel._tree import map_tensors
from accel.accelerator.configs import DataLoaderConfiguration
from accel.accelerator.data_config import check_dataloader_config, seed_loader
from accel.accelerator.gradient_state import GradientState
from accel.accelerator.operations import Keep
from accel.accelerator.sharding import shard_loader
from accel.accelerator.skipping import SkippedEpochStart, skipping_loader
from accel.accelerator.state import ProcessState

_END = object()
"""Returned by next() on an exhausted iterator."""


class _Epoch:
    """One running pass over the loader: its number, how many batches it has yielded, and the RNG
    states from just before it started (which, replayed, give the same shuffling)."""

    __slots__ = ("index", "batches", "rng")

    def __init__(self, index: int, rng: dict[str, Any]) -> None:
        self.index = index
        self.batches = 0
        self.rng = rng


class PreparedDataLoader:
    """Iterates the user's DataLoader, moving each batch to the device.

    It looks one batch ahead so that the last batch of an epoch is known while it is being
    used: gradient accumulation then syncs on it instead of carrying a partial window into
    the next epoch.

    `state_dict()` records the position in the running epoch; after `load_state_dict()`, the
    next iteration continues that epoch at the next batch, in the same order (see
    docs/checkpoints.md).

    With several processes (`state`), `loader` is rebuilt so that each process iterates its own
    part of every epoch; `self.loader` is that rebuilt loader and `len()` counts this process's
    batches. `config` (None: the defaults) chooses how the batches are split, whether shuffling
    is seeded per epoch, and whether batches move to the device with `non_blocking`.

    `skip_first_batches(n)` gives a view of this loader whose next epoch starts at batch n of
    that epoch (see skipping.py and docs/checkpoints.md).
    """

    def __init__(
        self,
        loader: DataLoader[Any],
        device: torch.device,
        gradients: GradientState,
        place: bool,
        state: ProcessState | None = None,
        *,
        config: DataLoaderConfiguration | None = None,
    ):
        config = DataLoaderConfiguration() if config is None else config
        check_dataloader_config(config)
        seeded, self._seeded = seed_loader(loader, config)
        self.loader, self._sharding = shard_loader(seeded, state or ProcessState(device=device), config)
        self.config = config
        self.ending = False
        """True while the epoch's last batch is in use (gather_for_metrics then drops padding)."""
        self.device = device
        self._gradients = gradients
        self._place = place and device.type != "cpu"
        self._non_blocking = config.non_blocking
        self._epochs_started = 0
        self._running: list[_Epoch] = []
        self._resume: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        return self._iterate(None)

    def skip_first_batches(self, num_batches: int = 0) -> SkippedEpochStart:
        """This loader, with its next epoch starting at batch `num_batches` of that epoch (counted from
        the epoch's start, also when load_state has positioned it inside the epoch); later epochs are whole."""
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
        if skip is not None and loaded is not None and skip < loaded["batch"] >= _length(self.loader):
            self._finish_loaded_epoch()  # it has no batch left: the skip is for the epoch after it
        gradients = self._gradients
        gradients.end_of_dataloader = False
        epoch = _Epoch(self._epochs_started, _capture_rng(self.loader))
        self._sharding.start_epoch(epoch.index)
        if self._seeded is not None:
            self._seeded.set_epoch(epoch.index)
        batches, current = self._open(epoch, skip)
        self._epochs_started = epoch.index + 1
        if current is _END:
            return
        self._running.append(epoch)
        try:
            for upcoming in batches:
                epoch.batches += 1
                yield self._to_device(current)
                current = upcoming
            gradients.end_of_dataloader = True
            epoch.batches += 1
            self.ending = True
            yield self._to_device(current)
        finally:
            gradients.end_of_dataloader = False
            self.ending = False
            self._running.remove(epoch)

    def _open(self, epoch: _Epoch, skip: int | None) -> tuple[Iterator[Any], Any]:
        """A fresh iterator over the loader (without its first `skip` batches) and its first batch,
        or, after `load_state_dict`, the iterator of the saved epoch moved past the batches it had
        already yielded (or past the first `skip`, when given)."""
        resume, self._resume = self._resume, None
        if resume is None:
            epoch.batches = skip or 0
            batches = iter(skipping_loader(self.loader, skip) if skip else self.loader)
            return batches, next(batches, _END)
        # Replay the saved epoch from the RNG states it started with, then put back the RNG state
        # load_state restored, so that the skipped batches leave no trace in it.
        restored = torch.get_rng_state()
        epoch.index, epoch.rng = resume["epoch"], resume["rng"]
        epoch.batches = resume["batch"] if skip is None else skip
        if self._seeded is not None:
            self._seeded.set_epoch(epoch.index)
        _apply_rng(self.loader, epoch.rng)
        try:
            batches = iter(self.loader)
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
        if self._seeded is not None:
            self._seeded.set_epoch(resume["epoch"])
        _apply_rng(self.loader, resume["rng"])
        try:
            for _ in skipping_loader(self.loader, resume["batch"]):
                pass
        finally:
            torch.set_rng_state(restored)
        self._epochs_started = resume["epoch"] + 1

    def __len__(self) -> int:
        return len(self.loader)

    def gathered_rows_to_keep(self) -> Keep:
        """While the epoch's last batch is in use: which rows of its gather across processes are real
        samples (the first n, or these positions), or None when none is padding."""
        if not self.ending or not self._running:
            return None
        return self._sharding.keep(self._running[-1].batches)

    def _to_device(self, batch: Any) -> Any:
        if not self._place:
            return batch
        return map_tensors(lambda t: t.to(self.device, non_blocking=self._non_blocking), batch)

    def state_dict(self) -> dict[str, Any]:
        """The position: `epoch` (0-based; the next one when no epoch is running), `batch` (batches
        yielded in it), and `rng`: the RNG states the running epoch started from; between epochs,
        None, or, when torch.Generators decide the order, their states ('torch' None)."""
        if self._resume is not None:  # loaded but not iterated yet: still at the loaded position
            return dict(self._resume)
        if not self._running:
            generators = _generators(self.loader)
            rng = {"torch": None, "generators": [g.get_state() for g in generators]} if generators else None
            return {"epoch": self._epochs_started, "batch": 0, "rng": rng}
        epoch = self._running[-1]
        return {"epoch": epoch.index, "batch": epoch.batches, "rng": epoch.rng}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position from `state_dict()`: the next iteration continues the saved epoch
        with the batch after the last one it yielded (none when that epoch had ended); a position
        between epochs puts the generators back as the next epoch will find them."""
        _check_position(state, len(_generators(self.loader)))
        self._epochs_started = state["epoch"]
        rng = state["rng"]
        if rng is not None and rng["torch"] is None:  # between epochs
            for generator, generator_state in zip(_generators(self.loader), rng["generators"]):
                generator.set_state(generator_state)
            rng = None
        self._resume = dict(state) if rng is not None else None

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"PreparedDataLoader({self.loader!r}, device={self.device})"


def _length(loader: DataLoader[Any]) -> float:
    """len(loader), or infinity when it has none (an IterableDataset without __len__)."""
    try:
        return len(loader)
    except TypeError:
        return float("inf")


def _generators(loader: DataLoader[Any]) -> list[torch.Generator]:
    """The torch.Generators that decide the loader's order: its own, its sampler's, and its batch
    sampler's sampler's (each once)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    candidates = [
        getattr(loader, "generator", None),
        getattr(getattr(loader, "sampler", None), "generator", None),
        getattr(getattr(batch_sampler, "sampler", None), "generator", None),
    ]
    found: list[torch.Generator] = []
    for generator in candidates:
        if isinstance(generator, torch.Generator) and not any(generator is g for g in found):
            found.append(generator)
    return found


def _capture_rng(loader: DataLoader[Any]) -> dict[str, Any]:
    """The global torch RNG state and that of each of the loader's generators."""
    return {"torch": torch.get_rng_state(), "generators": [g.get_state() for g in _generators(loader)]}


def _apply_rng(loader: DataLoader[Any], rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    for generator, state in zip(_generators(loader), rng["generators"]):
        generator.set_state(state)


def _check_position(state: Any, generators: int) -> None:
    """Raise ValueError unless `state` is a position from `state_dict()` for a loader like this one."""
    if not isinstance(state, dict) or set(state) != {"epoch", "batch", "rng"}:
        raise ValueError(
            f"PreparedDataLoader.load_state_dict got {state!r}; expected the dict state_dict() returns, "
            "with keys 'epoch', 'batch' and 'rng'."
        )
    if not all(isinstance(state[key], int) and state[key] >= 0 for key in ("epoch", "batch")):
        raise ValueError(f"PreparedDataLoader.load_state_dict: 'epoch' and 'batch' must be ints >= 0, got {state!r}.")
    rng = state["rng"]
    if rng is None:
        return
    if not isinstance(rng, dict) or set(rng) != {"torch", "generators"} or not isinstance(rng["generators"], list):
        raise ValueError(
            f"PreparedDataLoader.load_state_dict: 'rng' must be None or a dict with 'torch' and a list of "
            f"'generators', as state_dict() returns; got {rng!r:.200}."
        )
    if rng["torch"] is None and state["batch"] != 0:
        raise ValueError(
            f"PreparedDataLoader.load_state_dict: a position inside an epoch (batch {state['batch']}) needs its "
            "'torch' RNG state, which is None."
        )
    saved = len(rng["generators"])
    if saved != generators:
        raise ValueError(
            f"the saved dataloader position was taken with {saved} torch.Generator(s) deciding the order "
            f"(DataLoader(generator=...) or the sampler's), but this DataLoader has {generators}. Build the "
            "DataLoader as in the saved run, so that the epoch can be replayed in the same order."
        )
