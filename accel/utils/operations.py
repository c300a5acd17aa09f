"""Accelerate's functional collectives (`accelerate.utils.operations`), on this process's current state.

Each is a thin wrapper: it takes the process layout from the environment and the running process
group (see accel.distributed.partial_state.current_process_state) and calls the function of
accel.accelerator that does the work, which an Accelerator's methods call too. The module also
gives, at Accelerate's path, the nested-structure helpers of accel.utils.structures.
"""

from __future__ import annotations

from typing import Any

import torch

from accel.data.transfer import send_to_device
from accel.distributed import operations, padding
from accel.distributed.operations import DistributedOperationException
from accel.distributed.padding import CannotPadNestedTensorWarning
from accel.distributed.partial_state import current_process_state
from accel.utils.structures import (
    ConvertOutputsToFp32,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    find_device,
    honor_type,
    is_namedtuple,
    is_torch_tensor,
    listify,
    pad_input_tensors,
    recursively_apply,
    slice_tensors,
)

__all__ = [
    "CannotPadNestedTensorWarning",
    "ConvertOutputsToFp32",
    "DistributedOperationException",
    "broadcast",
    "broadcast_object_list",
    "concatenate",
    "convert_outputs_to_fp32",
    "convert_to_fp32",
    "copy_tensor_to_devices",
    "find_device",
    "gather",
    "gather_object",
    "honor_type",
    "is_namedtuple",
    "is_torch_tensor",
    "listify",
    "pad_across_processes",
    "pad_input_tensors",
    "recursively_apply",
    "reduce",
    "send_to_device",
    "slice_tensors",
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


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """The tensor that one process holds, on every process (on its device); the others pass None.

    Unlike `broadcast`, the receiving processes need not know the shape or dtype: the holder's
    travel first. It is a sum over the processes (as in Accelerate), so when several hold a
    tensor, of the same shape and dtype, every process gets their sum.
    """
    state = current_process_state()
    layouts = operations.gather_objects(None if tensor is None else (tuple(tensor.shape), tensor.dtype), state)
    layout = next((item for item in layouts if item is not None), None)
    if layout is None:
        raise ValueError("copy_tensor_to_devices: every process passed None; one must pass the tensor to copy.")
    if tensor is None:
        shape, dtype = layout
        tensor = torch.zeros(shape, dtype=dtype, device=state.device)
    return operations.reduce(tensor, state, "sum")
