"""The names scripts import from Accelerate's `accelerate.data_loader`, at the same path.

* `prepare_data_loader`: a DataLoader prepared without an Accelerator (accel.data.prepare).
* `skip_first_batches`: a dataloader without its first batches (accel.data.skipping).
* `SeedableRandomSampler`: the sampler `use_seedable_sampler=True` puts in place of a RandomSampler
  (accel's SeededRandomSampler; its constructor takes `seed=`, not Accelerate's `data_seed=`/`generator=`).
* `DataLoaderShard`: the class of a prepared dataloader (accel's PreparedDataLoader, a torch DataLoader).
* `IterableDatasetShard`: one process's elements of an IterableDataset (accel.data.iterable_sharding).
* `SkipBatchSampler`: a batch sampler without its first batches.
* `SkipDataLoader`: a DataLoader without its first batches on every pass.
* `BatchSamplerShard`: one process's batches of a batch sampler (accel.data.sharding).

* `DataLoaderDispatcher`: for `isinstance`: a prepared dataloader that dispatches its batches is one.

Not supported (docs/migration.md says why):
`DataLoaderAdapter`, `DataLoaderStateMixin`, `get_sampler`. They can be imported, so that a script
importing one still runs; using one raises NotImplementedError with the reason.
"""

from typing import Any, NoReturn

from accel._accelerate_names import refusals
from accel.data.iterable_sharding import IterableDatasetShard
from accel.data.loader import PreparedDataLoader
from accel.data.loader import PreparedDataLoader as DataLoaderShard
from accel.data.loader_options import SeededRandomSampler as SeedableRandomSampler
from accel.data.prepare import prepare_data_loader
from accel.data.sharding import BatchSamplerShard
from accel.data.skipping import SkipBatchSampler, SkipDataLoader, skip_first_batches


class _DispatchingLoaders(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, PreparedDataLoader) and instance.dispatches


class DataLoaderDispatcher(metaclass=_DispatchingLoaders):
    """What Accelerate's DataLoaderDispatcher is to `isinstance`: a prepared dataloader whose batches process 0
    reads and sends each process its part of (`DataLoaderConfiguration(dispatch_batches=True)`, the default for
    an IterableDataset). Build one with `accelerator.prepare(loader)` or `prepare_data_loader`, not directly.

    >>> isinstance(accelerator.prepare(DataLoader(stream, batch_size=4)), DataLoaderDispatcher)  # doctest: +SKIP
    True
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            "accel.data_loader.DataLoaderDispatcher is built by prepare: pass the DataLoader to accelerator.prepare "
            "(or prepare_data_loader) with DataLoaderConfiguration(dispatch_batches=True), the default for an "
            "IterableDataset."
        )


__all__ = [
    "BatchSamplerShard",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "IterableDatasetShard",
    "PreparedDataLoader",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "prepare_data_loader",
    "skip_first_batches",
]

__getattr__ = refusals(
    {
        "DataLoaderAdapter": "it adapts torchdata's StatefulDataLoader, which accel does not use: prepared dataloaders "
        "resume exactly through save_state/load_state.",
        "DataLoaderStateMixin": "a prepared dataloader (accel.data_loader.DataLoaderShard) keeps its own end-of-epoch state "
        "(accelerator.gradient_state.end_of_dataloader).",
        "get_sampler": "read the sampler from the DataLoader you prepared (dataloader.sampler / dataloader.batch_sampler).",
    },
    __name__,
)
