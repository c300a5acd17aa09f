"""The real sharding plan of a layout at any number of ranks, computed in this one process, before the job.

torch's fake process group plays one rank of a world of N (its collectives do nothing), and the model is
built on the meta device, so nothing is allocated however large it is. accel's own code then shards it as a
run would: tensor parallelism through `resolve_plan` and `parallelize` (the plan checked against tp_size:
a dimension or head count it does not divide is refused, naming the layer and the dimension), then FSDP2
through `shard_model` / `shard_data_parallel` (its units, HSDP's 2-D mesh, padded dim-0 chunks). The sizes
are checked against the world size first (`check_world`: a mesh that does not factor is refused, naming
each size). Each rank's bytes are read from its parameters' local shards: the padded storage FSDP2 keeps
for parameters and gradients, the shard's own rows for optimizer state. One rule is torch's and not a
shape's: under tensor parallelism alone, a row-wise (vocabulary-split) embedding's gradient comes back
whole on every tp rank (torch 2.13's embedding backward gives it Replicate placement); measured, and
counted so (under FSDP2 x TP the gradient is reduce-scattered to the shard like any other).

What this adds to training.py's formulas: placements and shard shapes from torch's real rules (tensor
parallelism has no formula there), and the refusals a job would meet on its first `prepare`. Where both
apply (FSDP2, HSDP) they agree byte for byte (tests/estimate/test_plan.py, 8 to 1,024 ranks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from accel.estimate.training import FP8_LEVELS, OPTIMIZERS, PRECISIONS, STEP_BYTES, RankBytes, _dtype
from accel.parallel.config import ParallelismConfig
from accel.parallel.tensor_plan import Plan


@dataclass(frozen=True)
class RankPlan:
    """One rank's place in the layout and what it holds there.

    `coordinates`: the rank's index along each mesh dimension (empty: no mesh, every rank holds the
    whole model); `shapes`: each parameter's local shard shape on this rank, by name.
    """

    rank: int
    coordinates: dict[str, int]
    held: RankBytes
    shapes: dict[str, tuple[int, ...]]


def plan_layout(
    build: Callable[[], nn.Module], config: ParallelismConfig, world: int, precision: str = "no",
    optimizer: str = "adamw", ranks: Sequence[int] | None = None, tp_plan: Plan | None = None,
) -> list[RankPlan]:
    """Shard the model `build` makes, as `config` lays it out over `world` processes, once per rank asked.

    Args:
        build: makes the model on the meta device (e.g. `lambda: build_on_meta("llama3-70b")`); called once
            per rank, since sharding replaces a model's parameters.
        config: the layout's sizes (dp_replicate_size, dp_shard_size, tp_size). dp_shard_size > 1 shards with
            FSDP2, as a run with an FSDP plugin does; cp and sp do not change what a rank holds and are refused.
        world: the number of processes (must equal the product of the sizes).
        precision: an accel precision of training.py's ("no", "bf16", "bf16-true", ...): the dtype each
            parameter is held in.
        optimizer: "adamw", "adam", "sgd" or "sgd-momentum": the state kept for each rank's own rows.
        ranks: the ranks to plan; default the first and the last (the fullest and the emptiest shards).
        tp_plan: tensor parallelism's plan, as `TorchTensorParallelConfig(plan=...)` gives it (module names
            to styles); None: the model's own (a transformers model's tp_plan).

    Returns:
        One RankPlan per rank asked, in rank order.

    Raises:
        ValueError: sizes that do not multiply to `world`, a layer or head count tp_size does not divide
            (naming it), a rank outside the world, or a process group already running in this process.

    Example:
        >>> with torch.device("meta"):
        ...     make = lambda: torch.nn.Sequential(torch.nn.Linear(4096, 4096))
        >>> first, last = plan_layout(make, ParallelismConfig(dp_shard_size=8), 8, "bf16")
        >>> first.held.total, last.coordinates  # (4 + 4 + 8) x 4096 x 4097 / 8, and 2 Adam steps
        (33562632, {'dp_shard': 7})
    """
    _check(config, world, precision, optimizer)
    asked = sorted(set(ranks if ranks is not None else (0, world - 1)))
    for rank in asked:
        if not 0 <= rank < world:
            raise ValueError(f"ranks: {rank} is not a rank of a world of {world} processes (0 to {world - 1})")
    return [_plan_rank(build, config, world, precision, optimizer, rank, tp_plan) for rank in asked]


def _check(config: ParallelismConfig, world: int, precision: str, optimizer: str) -> None:
    from accel.parallel.config import check_world

    sizes = config.sizes
    if sizes["cp"] > 1 or sizes["sp"] > 1:
        raise ValueError(f"cp_size={sizes['cp']}, sp_size={sizes['sp']}: the plan covers dp_replicate, dp_shard "
                         "and tp (cp and sp split activations, not what a rank holds between steps); leave them at 1")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not planned; accepted: {', '.join(PRECISIONS)}")
    if precision in FP8_LEVELS and sizes["tp"] > 1:
        raise ValueError(f"precision={precision!r} with tp_size={sizes['tp']}: accel runs no FP8 backend with tensor "
                         "parallelism (its FP8 layers replace the nn.Linear layers tensor parallelism splits); plan "
                         "bf16 with tensor parallelism, or FP8 with tp_size=1")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not planned; accepted: {', '.join(OPTIMIZERS)}")
    check_world({f"{name}_size": size for name, size in sizes.items()}, world, fsdp=True, where="the plan")


def _plan_rank(build: Callable[[], nn.Module], config: ParallelismConfig, world: int, precision: str,
               optimizer: str, rank: int, tp_plan: Plan | None) -> RankPlan:
    with fake_world(rank, world):
        model = build()
        dtypes = {name: _dtype(p, precision) for name, p in model.named_parameters()}
        mesh = _shard(model, config, rank, world, tp_plan)
        coordinates = dict(zip(mesh.mesh_dim_names or (), mesh.get_coordinate() or ())) if mesh is not None else {}
        return RankPlan(rank, coordinates, _held(model, dtypes, optimizer, config, world), _shapes(model))


@contextmanager
def fake_world(rank: int, world: int) -> Iterator[None]:
    """Within the block this process is rank `rank` of `world` on torch's fake process group."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise ValueError("the plan runs on a process group of its own: make it outside a distributed run (before "
                         "the Accelerator, or in a separate process such as `accel estimate-memory`)")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _shard(model: nn.Module, config: ParallelismConfig, rank: int, world: int,
           tp_plan: Plan | None) -> DeviceMesh | None:
    """Split and shard `model` in place with accel's own code; the mesh (None: every rank holds all)."""
    from accel.distributed.process_state import ProcessState
    from accel.fsdp import FullyShardedDataParallelPlugin
    from accel.fsdp.wrap import shard_model
    from accel.parallel import tensor_parallel as tp
    from accel.parallel.mesh import build_device_mesh, submesh
    from accel.parallel.tensor_plan import choose_plan, resolve_plan

    mesh, sizes = build_device_mesh(config, "cpu"), config.sizes
    if mesh is None:
        return None
    base = "no"  # FSDP2's MixedPrecisionPolicy casts in forward only: what a rank holds is read from `dtypes`
    if sizes["tp"] > 1:
        plan, given = choose_plan(model, tp_plan)
        tp.parallelize(model, mesh, resolve_plan(model, plan, sizes["tp"], given))
        if sizes["dp_shard"] > 1:
            tp.shard_data_parallel(model, mesh, FullyShardedDataParallelPlugin(fsdp_version=2), base)
    elif sizes["dp_shard"] > 1:
        names = ["dp_replicate", "dp_shard_cp"] if sizes["dp_replicate"] > 1 else ["dp_shard_cp"]
        state = ProcessState(device=torch.device("cpu"), process_index=rank, num_processes=world, backend="fake")
        shard_model(model, FullyShardedDataParallelPlugin(fsdp_version=2), base, torch.device("cpu"), state,
                    mesh=submesh(mesh, names))
    return mesh


def _local(parameter: torch.Tensor) -> torch.Tensor:
    to_local = getattr(parameter, "to_local", None)
    return to_local() if callable(to_local) else parameter


def _held(model: nn.Module, dtypes: dict[str, torch.dtype], optimizer: str, config: ParallelismConfig,
          world: int) -> RankBytes:
    whole_gradients = {f"{name}.weight" for name, module in model.named_modules() if isinstance(module, nn.Embedding)}
    parameters = gradients = state = 0
    for name, parameter in model.named_parameters():
        local, itemsize = _local(parameter), dtypes[name].itemsize
        own = local.numel() * itemsize
        held = local.untyped_storage().nbytes() // local.element_size() * itemsize  # FSDP2's padding included
        parameters += held
        if parameter.requires_grad:
            whole = name in whole_gradients and _split_rows(parameter) and config.sizes["dp_shard"] == 1
            gradients += parameter.numel() * itemsize if whole else held
            state += OPTIMIZERS[optimizer] * own + (STEP_BYTES if optimizer.startswith("adam") else 0)
    replicated = config.sizes["dp_shard"] == 1 and config.sizes["tp"] == 1 and world > 1  # DDP: its gradient buckets
    return RankBytes(dist.get_rank(), parameters, gradients, state, gradients if replicated else 0)


def _split_rows(parameter: torch.Tensor) -> bool:
    """Whether `parameter` is a DTensor split on its rows (Shard(0)) over some mesh dimension."""
    from torch.distributed.tensor import Shard

    return any(placement == Shard(0) for placement in getattr(parameter, "placements", ()))


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(_local(parameter).shape) for name, parameter in model.named_parameters()}
