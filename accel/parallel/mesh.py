"""The torch DeviceMesh a ParallelismConfig describes, with Accelerate's dimension names.

One dimension per size > 1, in the order dp_replicate, dp_shard, cp, tp (outermost first, so a tp
group is made of neighbouring ranks), and the flattened dimensions Accelerate adds: `dp` (every
data-parallel dimension: ranks that see different batches), `dp_shard_cp` (what FSDP shards over)
and `dp_cp` (what the loss is averaged over), each where its parts exist.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

if TYPE_CHECKING:
    from accel.parallel.config import ParallelismConfig


def build_device_mesh(config: ParallelismConfig, device_type: str) -> DeviceMesh | None:
    """The mesh over all processes of the running process group, or None when every size is 1.

    >>> # under `accel launch --num_processes 4`:
    >>> # build_device_mesh(ParallelismConfig(dp_replicate_size=2, dp_shard_size=2), "cpu").mesh_dim_names
    >>> # ('dp_replicate', 'dp_shard')   and mesh["dp"], mesh["dp_shard_cp"], mesh["dp_cp"] exist too
    """
    names, shape = config.mesh_layout()
    if not names:
        return None
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
    for flat, parts in (("dp", config.dp_dim_names), ("dp_shard_cp", config.dp_shard_cp_dim_names),
                        ("dp_cp", config.dp_cp_dim_names)):
        if parts:
            mesh[tuple(parts)]._flatten(flat)
    return mesh


def submesh(mesh: DeviceMesh, names: Sequence[str]) -> DeviceMesh:
    """`mesh[names]`, flattened dimensions included. torch 2.10+ warns that slicing a flattened dimension from
    the root mesh "will be deprecated"; Accelerate's names are flattened dimensions, so that warning is
    about this function's own way of reaching them, and is not passed on to the user."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Slicing a flattened dim", category=UserWarning)
        return mesh[tuple(names)]


def data_parallel_place(mesh: DeviceMesh | None, config: ParallelismConfig) -> tuple[int, int] | None:
    """(data-parallel size, this process's data-parallel rank): which part of the data this process reads.

    Ranks of one tp/cp group share a place (they must see the same batch); None without a mesh or
    when every rank is its own place (no tp/cp dimension), where the world's layout already says it.
    """
    if mesh is None or not config.non_dp_dim_names:
        return None
    if not config.dp_dim_names:
        return 1, 0
    return config.data_parallel_size, submesh(mesh, ["dp"]).get_local_rank()
