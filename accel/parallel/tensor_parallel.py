"""Applying tensor parallelism to a model, and what a training loop needs from it afterwards.

`parallelize` splits the planned layers over the mesh's "tp" dimension with torch's
`parallelize_module` (their parameters become DTensors; the other parameters stay whole on every
process), keeps tied weights tied, and, with a "dp_shard" dimension, shards everything with FSDP2 over
the data-parallel part of the mesh (2-D: FSDP2 + TP; with "dp_replicate" too, HSDP + TP).
`clip_grad_norm_` takes the total norm over plain and DTensor gradients on any mesh.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

from accel.fsdp.plugin import FullyShardedDataParallelPlugin
from accel.fsdp.precision import mixed_precision_policy
from accel.fsdp.wrap import modules_to_shard, parameter_attributes, restore_parameter_attributes

DATA_DIMS = ("dp_replicate", "dp_shard")
"""The data-parallel dimensions of a mesh (Accelerate's names), outermost first."""


def dim_size(mesh: DeviceMesh, name: str) -> int:
    """The size of `mesh`'s dimension `name`, 1 when the mesh has none (Accelerate leaves size-1 dimensions out)."""
    names = mesh.mesh_dim_names or ()
    return mesh.size(names.index(name)) if name in names else 1


def is_tensor_parallel(model: nn.Module) -> bool:
    """True when some parameter of `model` is a DTensor (split by tensor parallelism or sharded)."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def parallelize(model: nn.Module, mesh: DeviceMesh, styles: dict[str, ParallelStyle]) -> nn.Module:
    """Split `model`'s planned layers (`styles`, by concrete module name) over `mesh["tp"]`, in place.

    torch's styles broadcast each split weight from the first process of its tp group, so the processes agree
    even if their copies differed. Parameters tied before (an embedding and its output layer) are tied again
    afterwards when their layouts agree; else ValueError names them.
    """
    tied = _tied_groups(model)
    attributes = parameter_attributes(model)
    parallelize_module(model, mesh["tp"], styles)
    _retie(model, tied)
    restore_parameter_attributes(model, attributes)
    return model


def shard_data_parallel(
    model: nn.Module, mesh: DeviceMesh, plugin: FullyShardedDataParallelPlugin, precision_name: str
) -> nn.Module:
    """Shard the tensor-parallel `model` with FSDP2 over the mesh's data-parallel dimensions (2-D, or HSDP + TP
    with "dp_replicate"), units as the plugin's auto_wrap_policy says, then the root; the same object."""
    names = [name for name in DATA_DIMS if dim_size(mesh, name) > 1]
    data_mesh = mesh[tuple(names)] if len(names) > 1 else mesh[names[0]]
    policy = mixed_precision_policy(precision_name, cast("MixedPrecisionPolicy | None", plugin.mixed_precision_policy))
    offload = plugin.offload_policy or OffloadPolicy()
    attributes = parameter_attributes(model)
    for unit in [*modules_to_shard(model, plugin), model]:  # the blocks first, then the root with the rest
        fully_shard(unit, mesh=data_mesh, reshard_after_forward=plugin.reshard_after_forward, mp_policy=policy,
                    offload_policy=offload)
    restore_parameter_attributes(model, attributes)
    return model


def clip_grad_norm_(parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """Clip the gradients' total norm across every process's parts; return it (a plain tensor, equal everywhere).

    Gradients are grouped by kind: plain ones (whole on every process of their tp group) and DTensors by
    their mesh; each group's norm is taken by torch (DTensor norms reduce over their mesh), the groups'
    norms are combined, and every group is scaled by the same factor. Every process must call it.

    >>> p = nn.Parameter(torch.ones(4)); p.grad = torch.full((4,), 2.0)
    >>> float(clip_grad_norm_([p], 1.0))
    4.0
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    groups: dict[DeviceMesh | None, list[torch.Tensor]] = {}  # mesh (None: plain tensors) -> parameters with gradients
    grads: dict[DeviceMesh | None, list[torch.Tensor]] = {}
    for parameter in parameters:
        grad = parameter.grad
        if grad is not None:
            key: DeviceMesh | None = grad.device_mesh if isinstance(grad, DTensor) else None
            groups.setdefault(key, []).append(parameter)
            grads.setdefault(key, []).append(grad)
    if not groups:
        return torch.tensor(0.0)
    norms = [_full(nn.utils.get_total_norm(group, norm_type)) for group in grads.values()]
    total = torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]), norm_type)
    for mesh, group in groups.items():
        scale = total if mesh is None else DTensor.from_local(total, mesh, [Replicate()] * mesh.ndim)
        nn.utils.clip_grads_with_norm_(group, max_norm, scale)
    return total


def _full(norm: torch.Tensor) -> torch.Tensor:
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def _tied_groups(model: nn.Module) -> list[list[str]]:
    """The names of each parameter that `model` holds under several names (tied weights), grouped."""
    by_id: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(parameter), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def _retie(model: nn.Module, groups: list[list[str]]) -> None:
    """Make each group of formerly tied names point at one parameter again (the first name's)."""
    for names in groups:
        first = model.get_parameter(names[0])
        for name in names[1:]:
            other = model.get_parameter(name)
            if other is first:
                continue
            if _layout(first) != _layout(other):
                raise ValueError(
                    f"tensor parallel plan: tied parameters {names[0]!r} and {name!r} are split differently "
                    f"({_layout(first)} vs {_layout(other)}); give both layers styles that split the shared weight "
                    "alike (a row-wise embedding with a column-wise output layer), or untie them."
                )
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, first)


def _layout(parameter: torch.Tensor) -> str:
    return str(parameter.placements) if isinstance(parameter, DTensor) else "whole"
