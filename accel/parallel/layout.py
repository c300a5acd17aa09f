"""The ParallelismConfig an Accelerator runs with: from its keyword, else the environment, else FSDP's
HYBRID_SHARD; checked against the world size and the FSDP plugin, and completed where Accelerate
completes it (all sizes 1 on several processes: the whole world is one data-parallel dimension).

Every refusal happens here, when the Accelerator is built, naming the sizes and what would work.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from accel.distributed.process_state import ProcessState
from accel.parallel.config import CP_REASON, SP_REASON, ParallelismConfig, check_world
from accel.parallel.mesh import build_device_mesh, data_parallel_place
from accel.settings import PARALLELISM_SETTINGS

USE_VARIABLE = "ACCELERATE_USE_PARALLELISM_CONFIG"
"""What `accelerate launch` sets when its config has a parallelism_config (the sizes in PARALLELISM_CONFIG_*)."""
HYBRID_SHARD = "HYBRID_SHARD"


def from_environment(environ: Any = None) -> ParallelismConfig | None:
    """A ParallelismConfig when `accel launch` (ACCEL_PARALLELISM_CONFIG_*) or `accelerate launch`
    (ACCELERATE_USE_PARALLELISM_CONFIG=true, PARALLELISM_CONFIG_*) asked for one; else None."""
    environ = os.environ if environ is None else environ
    asked = environ.get(USE_VARIABLE, "").strip().lower() in ("1", "true", "yes", "y", "t", "on")
    if asked or any(setting.lookup(environ) is not None for setting in PARALLELISM_SETTINGS):
        return ParallelismConfig()
    return None


def from_tp_plugin(config: Any, torch_tp_plugin: Any) -> Any:
    """`Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=N))`, Accelerate's older spelling, as
    `ParallelismConfig(tp_size=N)` (as Accelerate turns it); with both given their tp sizes must agree."""
    from accel.kwargs_handlers.tensor_parallel import TorchTensorParallelPlugin

    if torch_tp_plugin is None:
        return config
    if not isinstance(torch_tp_plugin, TorchTensorParallelPlugin):
        raise TypeError(f"Accelerator(torch_tp_plugin={torch_tp_plugin!r}): give a TorchTensorParallelPlugin "
                        "(from accel.utils import TorchTensorParallelPlugin), or parallelism_config="
                        "ParallelismConfig(tp_size=...).")
    if torch_tp_plugin.torch_device_mesh is not None:
        raise ValueError("Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(torch_device_mesh=...)): accel builds the "
                         "device mesh from the sizes; give tp_size (and parallelism_config for the other dimensions) instead.")
    if config is None:
        return ParallelismConfig(tp_size=torch_tp_plugin.tp_size)
    if isinstance(config, ParallelismConfig) and config.tp_size != torch_tp_plugin.tp_size:
        raise ValueError(f"Accelerator(parallelism_config={config!r}, torch_tp_plugin={torch_tp_plugin!r}): the two tp "
                         "sizes differ. Give parallelism_config alone (torch_tp_plugin is its older spelling).")
    return config


def resolve(config: Any, process_state: ProcessState, fsdp_plugin: Any, deepspeed_plugin: Any = None) -> ParallelismConfig | None:
    """The config in force, checked (module docstring); None without one (no mesh, as in Accelerate).

    Example: on 4 processes with an FSDP plugin, ParallelismConfig() becomes dp_shard_size=4, and
    ParallelismConfig(dp_replicate_size=2, dp_shard_size=2) stays HSDP.
    """
    if config is not None and not isinstance(config, ParallelismConfig):
        raise TypeError(
            f"Accelerator(parallelism_config={config!r}): give a ParallelismConfig (from accel import ParallelismConfig)."
        )
    config = config if config is not None else from_environment()
    config = _with_hybrid_shard(config, fsdp_plugin, process_state)
    if config is None:
        return None
    if config.deepspeed_ulysses:
        _check_ulysses(config, process_state, deepspeed_plugin is not None)
        return config
    world, fsdp = process_state.num_processes, fsdp_plugin is not None
    _check_context_parallel(config, process_state, fsdp)
    config = _data_parallel_filled(config, world, fsdp)
    names = ("dp_replicate_size", "dp_shard_size", "tp_size", "sp_size")
    sizes = {name: config.sizes[name.removesuffix("_size")] for name in names}
    check_world(sizes, world, fsdp=fsdp, where=f"Accelerator(parallelism_config={config!r})")
    if config.total_size == 1 and world > 1:
        config = config.with_sizes(**{"dp_shard_size" if fsdp else "dp_replicate_size": world})
    if fsdp and world > 1 and not config.dp_shard_cp_dim_names:
        raise ValueError(
            f"Accelerator(parallelism_config={config!r}) with an FSDP plugin: FSDP2 shards over dp_shard_size, which "
            f"is 1, so there is nothing to shard over. Give dp_shard_size > 1 (its product with the other sizes "
            f"must be {world}), or leave out the fsdp_plugin (--use_fsdp) for DDP with dp_replicate_size."
        )
    return config


def _check_ulysses(config: ParallelismConfig, process_state: ProcessState, deepspeed: bool) -> None:
    """DeepSpeed's Ulysses runs inside DeepSpeed's engine, over sp_size-process groups of the world."""
    where = f"Accelerator(parallelism_config={config!r})"
    if not deepspeed:
        raise ValueError(f"{where}: {SP_REASON}.")
    if process_state.num_processes % config.sizes["sp"]:
        raise ValueError(f"{where}: sp_size={config.sizes['sp']} does not divide the {process_state.num_processes} "
                         "processes; DeepSpeed's Ulysses groups consecutive processes by sp_size.")


def _check_context_parallel(config: ParallelismConfig, process_state: ProcessState, fsdp: bool) -> None:
    """cp_size > 1 runs on CUDA, within FSDP2 (as in Accelerate): refused otherwise, naming what runs instead."""
    if not config.cp_enabled:
        return
    where = f"Accelerator(parallelism_config={config!r})"
    if process_state.device.type != "cuda":
        raise NotImplementedError(f"{where} on {process_state.device}: {CP_REASON}.")
    if not fsdp:
        raise ValueError(f"{where}: cp_size shards the sequence within FSDP2 (the model is sharded over dp_shard and cp "
                         "together, as in Accelerate); pass fsdp_plugin=FullyShardedDataParallelPlugin() (--use_fsdp).")


def _data_parallel_filled(config: ParallelismConfig, world: int, fsdp: bool) -> ParallelismConfig:
    """With sp_size > 1 and no data-parallel size given, the rest of the world is data parallel (as DeepSpeed's
    Ulysses overlays it): ParallelismConfig(sp_size=2) on 4 processes is 2 data-parallel places of 2 sequence
    ranks (dp_shard with FSDP, else dp_replicate)."""
    sizes = config.sizes
    rest, remainder = divmod(world, sizes["sp"] * sizes["tp"] * sizes["cp"])
    if sizes["sp"] == 1 or sizes["dp_replicate"] * sizes["dp_shard"] > 1 or remainder or rest == 1:
        return config
    return config.with_sizes(**{"dp_shard_size" if fsdp else "dp_replicate_size": rest})


def context_parallel(config: ParallelismConfig | None, mesh: Any) -> Any:
    """The ContextParallel of the mesh's "cp" dimension (accel.parallel.context), or None when cp_size is 1."""
    if config is None or not config.cp_enabled:
        return None
    from accel.parallel.context import ContextParallel

    return ContextParallel(mesh, config.cp_handler)


def sequence_parallel(config: ParallelismConfig | None, mesh: Any) -> Any:
    """The SequenceParallel of the mesh's "sp" dimension (accel.parallel.sequence), or None when sp_size is 1."""
    if config is None or not config.sp_enabled or config.deepspeed_ulysses:
        return None
    from accel.parallel.sequence.ulysses import SequenceParallel

    return SequenceParallel.from_mesh(mesh)


def _hybrid_asked(plugin: Any, environ: Any = None) -> bool:
    """Whether the FSDP plugin, or `accelerate launch` (FSDP_SHARDING_STRATEGY with ACCELERATE_USE_FSDP), asks for
    HYBRID_SHARD (or its ZeRO-2 variant, numbers 4 and 5)."""
    if plugin is None:
        return False
    if getattr(plugin, "sharding_strategy", None) == HYBRID_SHARD:
        return True
    environ = os.environ if environ is None else environ
    launched = environ.get("ACCELERATE_USE_FSDP", "").strip().lower() in ("1", "true", "yes", "y", "t", "on")
    strategy = environ.get("FSDP_SHARDING_STRATEGY", "").strip().upper()
    return launched and ("HYBRID_SHARD" in strategy or strategy in ("4", "5"))


def _with_hybrid_shard(config: ParallelismConfig | None, plugin: Any, state: ProcessState) -> ParallelismConfig | None:
    """FSDP's HYBRID_SHARD (Accelerate's FSDP1 strategy) as HSDP: replicate across machines, shard within one."""
    if not _hybrid_asked(plugin):
        return config
    if config is None:
        machines = state.num_processes // state.num_local_processes
        return ParallelismConfig(dp_replicate_size=machines, dp_shard_size=state.num_local_processes)
    if config.total_size > 1 and not (config.dp_replicate_enabled and config.dp_shard_enabled):
        raise ValueError(
            f"FullyShardedDataParallelPlugin(sharding_strategy='HYBRID_SHARD') asks for HSDP, but {config!r} has not "
            "both dp_replicate_size > 1 and dp_shard_size > 1. Give both sizes, or leave out sharding_strategy (the "
            "parallelism_config alone says the layout)."
        )
    return config


def mesh_and_place(config: ParallelismConfig | None, process_state: ProcessState) -> tuple[Any, ProcessState]:
    """The DeviceMesh (None without a config or with one process) and the process state with this process's
    data-parallel place when tp groups share batches."""
    if config is None or process_state.num_processes == 1 or config.deepspeed_ulysses:
        return None, process_state
    mesh = config.device_mesh
    if mesh is None:
        mesh = config.device_mesh = build_device_mesh(config, process_state.device.type)
    place = data_parallel_place(mesh, config)
    return mesh, process_state if place is None else dataclasses.replace(process_state, data_parallel=place)
