"""How a batch is made: the prepared DataLoader and what decides each process's part of an epoch.

loader (PreparedDataLoader), configuration (DataLoaderConfiguration), loader_options (what the
configuration means for a loader, the seeded sampler), sharding and iterable_sharding (map-style
and iterable datasets split between processes), skipping (resume mid-epoch), position (an epoch's
place, saved and restored), prepare (prepare_data_loader without an Accelerator), transfer
(send_to_device).
"""
