"""Launched on 2 or 4 processes: train the tiny model under several ParallelismConfig layouts one after
another (each a new Accelerator) and report the mesh, the parameters' placements, the data each rank
read and the global loss of each step."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "fsdp"))
sys.path.insert(0, str(Path(__file__).parent.parent / "distributed" / "two_processes"))

import torch  # noqa: E402
from fsdp_tiny import GLOBAL_BATCH, batch, loss_of, make_model, optimizer_for  # noqa: E402
from launching import report  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from accel import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig  # noqa: E402
from accel.data_loader import prepare_data_loader  # noqa: E402
from accel.parallel.mesh import submesh  # noqa: E402
from accel.utils import TorchTensorParallelConfig  # noqa: E402

STEPS = 4
LAYOUTS = {
    4: {"hsdp": ({"dp_replicate_size": 2, "dp_shard_size": 2}, True), "fsdp": ({"dp_shard_size": 4}, True),
        "ddp": ({"dp_replicate_size": 4}, False), "whole_world": ({}, True),
        "tp_2d": ({"dp_shard_size": 2, "tp_size": 2}, True)},
    2: {"fsdp": ({"dp_shard_size": 2}, True), "ddp": ({"dp_replicate_size": 2}, False), "tp_only": ({"tp_size": 2}, False)},
}
PLAN = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}
"""The tensor-parallel layouts' plan (the tiny model has no tp_plan of its own)."""


def dataset() -> TensorDataset:
    """Every step's global batch, in order; column 0 of x (with the row number in column 7) tells rows apart."""
    xs, ys = zip(*(batch(step) for step in range(STEPS)))
    x = torch.cat(xs)
    x[:, 7] = torch.arange(len(x), dtype=x.dtype)
    return TensorDataset(x, torch.cat(ys))


def train(name: str, sizes: dict[str, int], fsdp: bool) -> None:
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["Block"]) if fsdp else None
    handler = TorchTensorParallelConfig(plan=PLAN) if sizes.get("tp_size", 1) > 1 else None
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes, tp_handler=handler), fsdp_plugin=plugin)
    mesh = accelerator.torch_device_mesh
    flattened = {flat: submesh(mesh, [flat]).size() for flat in ("dp", "dp_shard_cp", "dp_cp") if _has(mesh, flat)}
    report(f"{name}_mesh", [list(mesh.mesh_dim_names), list(mesh.shape), flattened])
    report(f"{name}_strategy", type(accelerator.strategy).__name__)
    report(f"{name}_ranks", [accelerator.data_parallel_rank, accelerator.data_parallel_shard_rank,
                             accelerator.tensor_parallel_rank])
    dp = accelerator.process_state.data_parallel_size
    model = make_model()
    optimizer = optimizer_for(model)
    loader = DataLoader(dataset(), batch_size=GLOBAL_BATCH // dp)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    weight = next(iter(accelerator.unwrap_model(model).parameters()))
    report(f"{name}_placements", str(getattr(weight, "placements", None)))
    losses, rows = [], []
    for x, y in loader:
        loss = loss_of(model, x, y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
        rows.append([int(r) for r in x[:, 7].tolist()])
    report(f"{name}_losses", losses)
    report(f"{name}_rows", rows)
    report(f"{name}_full", {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()})
    if name == "hsdp":
        accelerator.save_state(str(Path(sys.argv[1]) / "hsdp"))


def reload(sizes: dict[str, int]) -> None:
    """Load the HSDP run's sharded checkpoint into another layout; report the weights it then holds."""
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["Block"])
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes), fsdp_plugin=plugin)
    model = make_model(seed=1)
    loader = DataLoader(dataset(), batch_size=GLOBAL_BATCH // accelerator.process_state.data_parallel_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer_for(model), loader)
    accelerator.load_state(str(Path(sys.argv[1]) / "hsdp"))
    report("reloaded_full", {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()})


def _has(mesh: object, name: str) -> bool:
    try:
        submesh(mesh, [name])  # type: ignore[arg-type]
    except (KeyError, RuntimeError, ValueError):
        return False
    return True


def tensor_parallel_data(world: int) -> None:
    """Ranks of one tp group read the same rows (mesh dp_shard=world/2 x tp=2), through prepare_data_loader."""
    config = ParallelismConfig(dp_shard_size=world // 2, tp_size=2)
    mesh = config.build_device_mesh("cpu")
    loader = prepare_data_loader(DataLoader(dataset(), batch_size=GLOBAL_BATCH // (world // 2)), torch_device_mesh=mesh)
    report("tp_rows", [[int(r) for r in x[:, 7].tolist()] for x, _ in loader])
    dp = [submesh(mesh, ["dp"]).size(), submesh(mesh, ["dp"]).get_local_rank()] if _has(mesh, "dp") else []
    report("tp_mesh", [list(mesh.mesh_dim_names), list(mesh.shape), *dp])


def bad_input(world: int) -> None:
    plugin = FullyShardedDataParallelPlugin()
    cases = {
        "product": (ParallelismConfig(dp_replicate_size=world, dp_shard_size=2), plugin),
        "shard_without_fsdp": (ParallelismConfig(dp_shard_size=world), None),
        "fsdp_without_shard": (ParallelismConfig(dp_replicate_size=world), plugin),
    }
    for case, (config, fsdp) in cases.items():
        try:
            Accelerator(cpu=True, parallelism_config=config, fsdp_plugin=fsdp)
            report(f"bad_{case}", None)
        except (ValueError, NotImplementedError) as error:
            report(f"bad_{case}", [type(error).__name__, str(error)])


if __name__ == "__main__":
    world = int(torch.distributed.get_world_size()) if torch.distributed.is_initialized() else int(
        __import__("os").environ["WORLD_SIZE"])
    for layout, (sizes, fsdp) in LAYOUTS[world].items():
        train(layout, sizes, fsdp)
    if world == 4:
        reload({"dp_shard_size": 4})
    tensor_parallel_data(world)
    bad_input(world)
