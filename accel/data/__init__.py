"""How a batch is made: the prepared DataLoader and what decides each process's part of an epoch.

The modules, by job:

* the loader: loader.py (`PreparedDataLoader`: batches on the device, the end of an epoch visible,
  a position a checkpoint saves), configuration.py (`DataLoaderConfiguration`, Accelerate's options
  object), loader_options.py (what that configuration means for a loader, the values refused, the
  seeded sampler), prepare.py (`prepare_data_loader`, without an Accelerator), transfer.py
  (`send_to_device`);
* each process's part: sharding.py (a map-style DataLoader split batch for batch, as Accelerate
  splits it), iterable_sharding.py (an IterableDataset split element for element), dispatching.py
  (batches read on the main process and sent in slices to every process);
* resuming: position.py (an epoch's place: the RNG states that decide its order, saved and
  restored), skipping.py (`skip_first_batches`, to resume mid-epoch).
"""
