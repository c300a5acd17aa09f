"""`prepare_data_loader`: Accelerate's function `accelerate.data_loader.prepare_data_loader`, which
prepares a DataLoader without an Accelerator.

It gives the same PreparedDataLoader `accelerator.prepare` gives, joined to the running
Accelerator's GradientState (`GradientState()`, see gradient_state.py). As Accelerate's,
`num_processes` and `process_index` (default: this run's) choose which part of the data the loader
yields, so one process can look at every process's part; the epoch's order is taken from process 0
only when they are this run's. Dispatched batches (`dispatch_batches`, which needs `put_on_device`)
always use this run's processes, as in Accelerate. What accel cannot do is refused with the reason:
StatefulDataLoader. With `torch_device_mesh`, the ranks of one tp/cp group read the same part.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils.data import DataLoader

from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.distributed.partial_state import current_process_state
from accel.distributed.process_state import ProcessState
from accel.training.gradient_state import GradientState

_RNG_TYPES = ("generator",)
"""What accel synchronises itself: the order each epoch draws is taken from process 0."""


def prepare_data_loader(
    dataloader: DataLoader[Any],
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Any = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
) -> PreparedDataLoader:
    """This process's part of `dataloader` (Accelerate's arguments and meanings; module docstring)."""
    if not isinstance(dataloader, DataLoader):
        raise TypeError(f"prepare_data_loader takes a torch DataLoader, not {type(dataloader).__name__}.")
    if isinstance(dataloader, PreparedDataLoader):
        return dataloader
    _check_unsupported(rng_types)
    state = _with_mesh_place(current_process_state(), torch_device_mesh)
    processes = state.data_parallel_size if num_processes is None else num_processes
    rank = state.data_parallel_index if process_index is None else process_index
    if not (isinstance(processes, int) and isinstance(rank, int) and 0 <= rank < processes):
        raise ValueError(
            f"prepare_data_loader(num_processes={num_processes!r}, process_index={process_index!r}): give ints with "
            f"0 <= process_index < num_processes (this run has {state.num_processes} processes), or leave them out."
        )
    config = DataLoaderConfiguration(
        split_batches=split_batches, dispatch_batches=dispatch_batches, even_batches=even_batches,
        use_seedable_sampler=use_seedable_sampler, data_seed=data_seed, non_blocking=non_blocking,
        use_stateful_dataloader=use_stateful_dataloader,
    )
    target = state.device if device is None else torch.device(device)
    return PreparedDataLoader(dataloader, target, GradientState(), bool(put_on_device), state, config=config,
                              layout=(processes, rank), slice_fn=slice_fn_for_dispatch)


def _with_mesh_place(state: ProcessState, mesh: Any) -> ProcessState:
    """`state` reading the data-parallel part `mesh` gives it (Accelerate's rule): the ranks of one tp/cp
    group read the same part; the parts are the dp_replicate x dp_shard ranks."""
    names = getattr(mesh, "mesh_dim_names", None) or ()
    if not names:
        return state
    size = {name: mesh[name].size() for name in ("dp_replicate", "dp_shard", "tp", "cp") if name in names}
    shared = size.get("tp", 1) * size.get("cp", 1)
    place = (size.get("dp_replicate", 1) * size.get("dp_shard", 1), state.process_index // shared)
    return dataclasses.replace(state, data_parallel=place)


def _check_unsupported(rng_types: Any) -> None:
    if rng_types is not None and any(str(getattr(t, "value", t)) not in _RNG_TYPES for t in rng_types):
        raise ValueError(
            f"prepare_data_loader(rng_types={rng_types!r}): accel keeps only the data order in step across "
            f"processes (rng_types={list(_RNG_TYPES)!r}, which it always does). Seed the other generators with "
            "accel.utils.set_seed, and leave rng_types out."
        )
