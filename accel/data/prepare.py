"""`prepare_data_loader`: Accelerate's function `accelerate.data_loader.prepare_data_loader`, which
prepares a DataLoader without an Accelerator.

It gives the same PreparedDataLoader `accelerator.prepare` gives, sharded over the processes of
this run, joined to the running Accelerator's GradientState (`GradientState()`, see
gradient_state.py). What accel cannot do is refused with the reason: batches dispatched from the
main process, a process layout other than the real one (accel splits data over the process group
it is in, with collectives), device meshes, StatefulDataLoader.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.distributed.partial_state import current_process_state
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
    _check_unsupported(rng_types, slice_fn_for_dispatch, torch_device_mesh)
    state = current_process_state()
    for name, given, real in (("num_processes", num_processes, state.num_processes),
                              ("process_index", process_index, state.process_index)):
        if given is not None and given != real:
            raise ValueError(
                f"prepare_data_loader({name}={given!r}): this is process {state.process_index} of "
                f"{state.num_processes}, and accel splits data only over the processes really running (it draws "
                f"each epoch's order on process 0 and sends it to the others). Leave {name} out, or pass {real}."
            )
    config = DataLoaderConfiguration(
        split_batches=split_batches, dispatch_batches=dispatch_batches, even_batches=even_batches,
        use_seedable_sampler=use_seedable_sampler, data_seed=data_seed, non_blocking=non_blocking,
        use_stateful_dataloader=use_stateful_dataloader,
    )
    target = state.device if device is None else torch.device(device)
    return PreparedDataLoader(dataloader, target, GradientState(), bool(put_on_device), state, config=config)


def _check_unsupported(rng_types: Any, slice_fn_for_dispatch: Any, torch_device_mesh: Any) -> None:
    if rng_types is not None and any(str(getattr(t, "value", t)) not in _RNG_TYPES for t in rng_types):
        raise ValueError(
            f"prepare_data_loader(rng_types={rng_types!r}): accel keeps only the data order in step across "
            f"processes (rng_types={list(_RNG_TYPES)!r}, which it always does). Seed the other generators with "
            "accel.utils.set_seed, and leave rng_types out."
        )
    if slice_fn_for_dispatch is not None:
        raise ValueError(
            "prepare_data_loader(slice_fn_for_dispatch=...): accel does not dispatch batches from the main process "
            "(each process reads its own part), so there is nothing to slice. Drop the argument."
        )
    if torch_device_mesh is not None:
        raise NotImplementedError(
            "prepare_data_loader(torch_device_mesh=...): accel splits data over all processes (data parallel only); "
            "it has no tensor/context-parallel groups that share batches. Drop the argument."
        )
