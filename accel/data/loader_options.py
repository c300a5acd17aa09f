"""What a `DataLoaderConfiguration` means for prepared dataloaders, and which values accel refuses; and what a
prepared loader reads from the user's DataLoader (`epoch_targets`, `given_batch_size`).

`check_dataloader_config` runs when the Accelerator is built: a field accel cannot honour raises
there, naming the field, the value and what to do, instead of being ignored in the training loop.
What the honoured fields do:

* `split_batches`, `even_batches`: how each process's part of an epoch is cut (sharding.py).
* `use_seedable_sampler`, `data_seed`: the DataLoader's RandomSampler is replaced by a
  `SeededRandomSampler`, whose order for epoch e is drawn from a generator seeded with
  `data_seed + e` (`data_seed` None: `torch.initial_seed()` when the loader is prepared), as
  Accelerate's SeedableRandomSampler draws it. The order then depends on nothing but the seed and
  the epoch: the same in every run, and after a resume.
* `non_blocking`: passed to `Tensor.to` when a batch moves to the device.
* `use_stateful_dataloader`: whether `load_state` puts the loader back where the checkpoint was
  taken (the batch after the last one it yielded, same epoch number, same order). False, as under
  Accelerate: `load_state` leaves the loader as prepared, and its next pass is a fresh epoch,
  which the script skips into itself (`skip_first_batches`). torchdata is not needed: accel's
  loader saves its own position (always; restoring it is what the option decides).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from accel._warnings import warn_once
from accel.data.configuration import DataLoaderConfiguration

_LOADER_OPTIONS = (
    "num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn", "multiprocessing_context",
    "generator", "prefetch_factor", "persistent_workers", "pin_memory_device", "in_order",
)
"""DataLoader arguments that a rebuilt loader takes over unchanged (the sampling ones are replaced)."""

_SEED_RANGE = 2**64


def check_dataloader_config(config: DataLoaderConfiguration) -> None:
    """Raise ValueError for a field of `config` that prepared dataloaders cannot honour."""
    if not isinstance(config, DataLoaderConfiguration):
        raise TypeError(
            f"dataloader_config={config!r} is not accepted; give a DataLoaderConfiguration "
            "(from accel.utils import DataLoaderConfiguration), or None for the defaults."
        )
    if config.data_seed is not None and not config.use_seedable_sampler:
        raise ValueError(
            f"DataLoaderConfiguration(data_seed={config.data_seed!r}) has no effect with use_seedable_sampler=False "
            "(only the seedable sampler uses it). Set use_seedable_sampler=True, or leave data_seed=None."
        )


def check_even_batches_apply(config: DataLoaderConfiguration, processes: int, padded_anyway: bool) -> None:
    """Warn (not ignore silently) that even_batches=False does not apply to an IterableDataset's loader or to
    dispatched batches: as under Accelerate, their last global batch is completed from the first one."""
    if not config.even_batches and processes > 1 and padded_anyway:
        warn_once("even_batches=False does not apply to an IterableDataset's loader or to dispatched batches: as "
                  "under Accelerate, the last global batch is completed from the first one, and gather_for_metrics "
                  "drops the repeated samples.", UserWarning)


def dispatches(config: DataLoaderConfiguration, loader: DataLoader[Any], place: bool) -> bool:
    """Whether process 0 reads `loader` and sends each process its part (Accelerate's rule): as
    `dispatch_batches` says; when None, for an IterableDataset whose batches go to the device. Dispatching
    needs batches on the device (`place`), as in Accelerate: asking for it without raises."""
    if config.dispatch_batches is None:
        return place and isinstance(loader.dataset, IterableDataset)
    if config.dispatch_batches and not place:
        raise ValueError(
            "DataLoaderConfiguration(dispatch_batches=True) sends each batch from process 0 to the device of every "
            "process, so it needs device placement, and this DataLoader is prepared with device_placement=False "
            "(put_on_device=False). Use device placement, or dispatch_batches=False (each process reads its own part)."
        )
    return bool(config.dispatch_batches)


def loader_options(loader: DataLoader[Any]) -> dict[str, Any]:
    """The arguments a rebuilt DataLoader takes over from `loader`."""
    options = {name: getattr(loader, name) for name in _LOADER_OPTIONS if hasattr(loader, name)}
    if options.get("num_workers", 0) == 0:  # DataLoader refuses these without workers
        options.pop("prefetch_factor", None)
        options.pop("persistent_workers", None)
    return options


class SeededRandomSampler(RandomSampler):
    """A RandomSampler whose order for epoch e is drawn from its generator seeded with `seed + e`
    (Accelerate's SeedableRandomSampler, also exported under that name from accel.data_loader):
    reproducible across runs, processes and resumes.

    Accelerate's constructor works too: `generator=` (else one of its own) and `data_seed=` (the
    seed; `seed=` is accel's name for it; neither: `torch.initial_seed()`). As Accelerate's, a pass
    that runs to its end moves it to the next epoch; a prepared loader also sets the epoch as each
    of its epochs starts (`set_epoch`)."""

    def __init__(self, data_source: Any, replacement: bool = False, num_samples: int | None = None,
                 generator: torch.Generator | None = None, *, seed: int | None = None,
                 data_seed: int | None = None) -> None:
        if seed is not None and data_seed is not None and seed != data_seed:
            raise ValueError(f"SeededRandomSampler(seed={seed!r}, data_seed={data_seed!r}): give one seed, not two.")
        super().__init__(data_source, replacement, num_samples, generator=generator or torch.Generator())
        chosen = seed if seed is not None else data_seed
        self.initial_seed = torch.initial_seed() if chosen is None else chosen
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next pass draws."""
        self.epoch = epoch

    def reseed(self) -> None:
        """Seed the generator for the current epoch."""
        seed = self.initial_seed + self.epoch
        self.generator.manual_seed(seed % _SEED_RANGE if seed >= _SEED_RANGE else seed)

    def __iter__(self) -> Any:
        self.reseed()
        yield from super().__iter__()
        self.epoch += 1


def seed_loader(
    loader: DataLoader[Any], config: DataLoaderConfiguration
) -> tuple[DataLoader[Any], SeededRandomSampler | None]:
    """With `use_seedable_sampler`, `loader` rebuilt around a SeededRandomSampler in place of its
    RandomSampler (and that sampler); otherwise, or when nothing is shuffled, `loader` itself."""
    if not config.use_seedable_sampler or isinstance(loader.dataset, IterableDataset):
        return loader, None
    batch_sampler = loader.batch_sampler
    sampler = loader.sampler if batch_sampler is None else getattr(batch_sampler, "sampler", None)
    if type(sampler) is SequentialSampler:
        return loader, None  # nothing shuffled, nothing to seed
    if isinstance(sampler, SeededRandomSampler) and (batch_sampler is None or type(batch_sampler) is BatchSampler):
        return loader, sampler  # the script's own seedable sampler: kept, with its seed
    if type(sampler) is not RandomSampler or (batch_sampler is not None and type(batch_sampler) is not BatchSampler):
        shown = type(batch_sampler if type(batch_sampler) not in (BatchSampler, type(None)) else sampler).__name__
        raise ValueError(
            f"DataLoaderConfiguration(use_seedable_sampler=True): this DataLoader orders its samples with {shown}, "
            "which accel cannot reseed (only the RandomSampler of DataLoader(shuffle=True) is replaced). Seed that "
            "sampler yourself (a torch.Generator per epoch), or set use_seedable_sampler=False."
        )
    seed = config.data_seed if config.data_seed is not None else torch.initial_seed()
    seeded = SeededRandomSampler(sampler.data_source, sampler.replacement, sampler._num_samples, seed=seed)
    options = loader_options(loader)
    if batch_sampler is None:
        return DataLoader(loader.dataset, sampler=seeded, batch_size=None, **options), seeded
    return DataLoader(
        loader.dataset, sampler=seeded, batch_size=batch_sampler.batch_size, drop_last=batch_sampler.drop_last, **options
    ), seeded


def epoch_targets(loader: DataLoader[Any]) -> list[Any]:
    """The user's dataset, sampler and batch sampler that have a set_epoch (each once)."""
    found: list[Any] = []
    for candidate in (loader.dataset, loader.sampler, loader.batch_sampler):
        if callable(getattr(candidate, "set_epoch", None)) and not any(candidate is f for f in found):
            found.append(candidate)
    return found


def given_batch_size(loader: DataLoader[Any]) -> int | None:
    """The batch size the script gave: the DataLoader's, else its batch sampler's (or, with batch_size=None,
    that of the BatchSampler given as its sampler); None when there is none."""
    if loader.batch_size is not None:
        return loader.batch_size
    holder = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    size = getattr(holder, "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) else None
