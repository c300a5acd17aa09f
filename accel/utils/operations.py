"""Accelerate's functional collectives (`accelerate.utils.operations`), on this process's current state.

Each is a thin wrapper: it takes the process layout from the environment and the running process
group (see accel.accelerator.partial_state.current_process_state) and calls the function of
accel.accelerator that does the work, which an Accelerator's methods call too.
"""

from __future__ import annotations

from typing import Any

from accel.accelerator import operations, padding
from accel.accelerator.operations import DistributedOperationException
from accel.accelerator.padding import CannotPadNestedTensorWarning
from accel.accelerator.partial_state import current_process_state
from accel.accelerator.transfer import send_to_device

__all__ = [
    "CannotPadNestedTensorWarning",
    "DistributedOperationException",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "pad_across_processes",
    "reduce",
    "send_to_device",
    "wait_for_everyone",
]


def gather(tensor: Any) -> Any:
    """Every process's tensors (nested tuple/list/dict), concatenated along the first dimension in process order."""
    return operations.gather(tensor, current_process_state())


def gather_object(object: Any) -> list[Any]:  # noqa: A002 - Accelerate's parameter name
    """Every process's list concatenated into one list (any other object: one per process)."""
    return operations.gather_object(object, current_process_state())


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """`from_process`'s values written into every tensor of `tensor` (nested), on every process; returns it."""
    return operations.broadcast(tensor, current_process_state(), from_process)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """`object_list`'s items replaced in place by `from_process`'s; returns the list."""
    return operations.broadcast_object_list(object_list, current_process_state(), from_process)


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
    """Each tensor padded along `dim` to the largest size any process has, with `pad_index`."""
    return padding.pad_across_processes(tensor, current_process_state(), dim, pad_index, pad_first)


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Each tensor reduced over the processes: "mean" (the default here, as in Accelerate's
    function; the Accelerator's method defaults to "sum"), "sum", "max", "min" or "none";
    then multiplied by `scale` when it is not 1."""
    reduced = operations.reduce(tensor, current_process_state(), reduction)
    if scale == 1.0:
        return reduced
    return operations.rebuild(reduced, [t * scale for t in operations.tensors_of(reduced)])


def wait_for_everyone() -> None:
    """Block until every process reaches this call (nothing to wait for in one process)."""
    operations.barrier(current_process_state())
