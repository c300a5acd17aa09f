"""Staging: a copy of the state in CPU memory that training cannot change, for a background write.

An asynchronous save returns while its files are still being written, and training goes on
changing the weights and optimizer state in place. So the save first copies every tensor it
will write: from an accelerator to CPU memory, and on the CPU into a fresh tensor (a clone).
Containers (dicts, lists, tuples) are rebuilt as well, so that a state_dict() that hands out
its live lists does not change under the writer either. A sharded state (DTensors) is copied
with torch's own staging, which keeps each tensor's sharding.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any

import torch
from torch.distributed.checkpoint.staging import _copy_state_dict, _create_cpu_state_dict

from accel.checkpointing.training_state import Snapshot


def stage_snapshot(snapshot: Snapshot) -> Snapshot:
    """`snapshot` with every tensor copied to CPU memory of its own.

    Example: `staged = stage_snapshot(collect(accelerator))`; `model.weight.add_(1)` afterwards
    leaves `staged.tensors["model.safetensors"]["weight"]` as it was.
    """
    return dataclasses.replace(
        snapshot,
        tensors={name: {key: _tensor(t) for key, t in part.items()} for name, part in snapshot.tensors.items()},
        objects={name: to_cpu(value) for name, value in snapshot.objects.items()},
    )


def to_cpu(value: Any) -> Any:
    """`value` with its tensors copied to CPU memory and its containers rebuilt (other values kept)."""
    if isinstance(value, torch.Tensor):
        return _tensor(value)
    if isinstance(value, (dict, OrderedDict)):
        rebuilt = {key: to_cpu(item) for key, item in value.items()}
        return OrderedDict(rebuilt) if isinstance(value, OrderedDict) else rebuilt
    if isinstance(value, list):
        return [to_cpu(item) for item in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(to_cpu(item) for item in value)
    if isinstance(value, set):
        return set(value)
    return value


def stage_sharded(state: dict[str, Any]) -> dict[str, Any]:
    """A CPU copy of a state dict that may hold DTensors (each process's shards), sharding kept."""
    return _copy_state_dict(state, _create_cpu_state_dict(state))


def _tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy (safetensors writes contiguous tensors; the values are what matter)."""
    tensor = tensor.detach()
    if tensor.device.type == "cpu":
        return tensor.clone(memory_format=torch.contiguous_format)
    return tensor.to("cpu", copy=True).contiguous()
