"""The names scripts import from Accelerate's `accelerate.data_loader`, at the same path.

* `prepare_data_loader`: a DataLoader prepared without an Accelerator (accel.accelerator.data_prepare).
* `skip_first_batches`: a dataloader without its first batches (accel.accelerator.skipping).
* `SeedableRandomSampler`: the sampler `use_seedable_sampler=True` puts in place of a RandomSampler
  (accel's SeededRandomSampler; its constructor takes `seed=`, not Accelerate's `data_seed=`/`generator=`).
* `DataLoaderShard`: the class of a prepared dataloader (accel's PreparedDataLoader, a torch DataLoader).
* `IterableDatasetShard`: one process's elements of an IterableDataset (accel.accelerator.iterable_sharding).
* `SkipBatchSampler`: a batch sampler without its first batches.
* `SkipDataLoader`: a DataLoader without its first batches on every pass.

Not here (docs/migration.md says why): `BatchSamplerShard`, `DataLoaderDispatcher`,
`DataLoaderAdapter`, `DataLoaderStateMixin`, `get_sampler`.
"""

from accel.accelerator.data import PreparedDataLoader
from accel.accelerator.data import PreparedDataLoader as DataLoaderShard
from accel.accelerator.data_config import SeededRandomSampler as SeedableRandomSampler
from accel.accelerator.data_prepare import prepare_data_loader
from accel.accelerator.iterable_sharding import IterableDatasetShard
from accel.accelerator.skipping import SkipBatchSampler, SkipDataLoader, skip_first_batches

__all__ = [
    "DataLoaderShard",
    "IterableDatasetShard",
    "PreparedDataLoader",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkipDataLoader",
    "prepare_data_loader",
    "skip_first_batches",
]
