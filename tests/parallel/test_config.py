"""ParallelismConfig in one process: Accelerate's fields and views (compared with Accelerate's own class),
sizes read from the environment, refusals at construction, FSDP's HYBRID_SHARD as HSDP, and the
checks `accel launch` makes before any process starts."""

from __future__ import annotations

import pytest
import torch
from accelerate.parallelism_config import ParallelismConfig as AccelerateConfig

import accel
import accel.parallelism_config
import accel.utils
from accel.distributed.process_state import ProcessState
from accel.fsdp import FullyShardedDataParallelPlugin
from accel.kwargs_handlers.tensor_parallel import TorchTensorParallelConfig
from accel.parallel import layout
from accel.parallel.config import ParallelismConfig, check_world

LAYOUTS = [
    {}, {"dp_shard_size": 4}, {"dp_replicate_size": 4}, {"dp_replicate_size": 2, "dp_shard_size": 2},
    {"dp_shard_size": 2, "tp_size": 2}, {"dp_replicate_size": 2, "dp_shard_size": 2, "tp_size": 2}, {"tp_size": 4},
    {"dp_shard_size": 2, "cp_size": 2}, {"cp_size": 4},
]
VIEWS = ("dp_dim_names", "non_dp_dim_names", "dp_shard_cp_dim_names", "dp_cp_dim_names", "fsdp_dim_names",
         "active_mesh_dims", "total_size", "data_parallel_size", "non_data_parallel_size", "dp_replicate_enabled",
         "dp_shard_enabled", "tp_enabled", "cp_enabled", "sp_enabled")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if "PARALLELISM_CONFIG" in name:
            monkeypatch.delenv(name)


def test_importable_wherever_accelerate_exports_it() -> None:
    assert accel.ParallelismConfig is accel.utils.ParallelismConfig is accel.parallelism_config.ParallelismConfig
    assert accel.ParallelismConfig is ParallelismConfig


@pytest.mark.parametrize("sizes", LAYOUTS)
def test_every_view_and_the_mesh_layout_equal_accelerates(sizes: dict[str, int]) -> None:
    ours, theirs = ParallelismConfig(**sizes), AccelerateConfig(**sizes)
    for view in VIEWS:
        assert getattr(ours, view) == getattr(theirs, view), view
    expected = theirs._get_mesh()  # (names, sizes) in Accelerate's order, or () when every size is 1
    assert ours.mesh_layout() == (tuple(expected) if expected else ((), ()))
    for field in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size", "cp_backend"):
        assert getattr(ours, field) == getattr(theirs, field), field
    # sp_backend: Accelerate's only one (and default) is DeepSpeed's, which accel refuses; accel's default is its own
    assert (ours.sp_backend, theirs.sp_backend) == ("torch", "deepspeed")


def test_sizes_left_out_are_read_from_accels_variable_else_accelerates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "4")
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_TP_SIZE", "2")
    config = ParallelismConfig(dp_replicate_size=3)
    assert (config.dp_replicate_size, config.dp_shard_size, config.tp_size, config.cp_size) == (3, 4, 2, 1)
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "4")
    with pytest.raises(ValueError, match="ACCEL_PARALLELISM_CONFIG_TP_SIZE='2' and PARALLELISM_CONFIG_TP_SIZE='4'"):
        ParallelismConfig()


def test_the_environment_asks_for_a_config_as_either_launcher_does(monkeypatch: pytest.MonkeyPatch) -> None:
    assert layout.from_environment({}) is None
    assert layout.from_environment({"ACCELERATE_USE_PARALLELISM_CONFIG": "false"}) is None
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "2")
    assert layout.from_environment({"ACCELERATE_USE_PARALLELISM_CONFIG": "true"}).dp_shard_size == 2  # type: ignore[union-attr]
    assert layout.from_environment({"ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE": "2"}) is not None


@pytest.mark.parametrize(("sizes", "error", "words"), [
    ({"sp_size": 2, "sp_backend": "deepspeed", "tp_size": 2}, ValueError, "DeepSpeed's Ulysses lays out its own groups"),
    ({"sp_handler": object(), "sp_size": 2, "sp_backend": "deepspeed"}, ValueError, "give a DeepSpeedSequenceParallelConfig"),
    ({"sp_size": 2, "tp_size": 2}, NotImplementedError, "accel does not compose the two"),
    ({"sp_backend": "ring"}, ValueError, "sp_backend='ring'"),
    ({"tp_size": 2, "dp_replicate_size": 2}, ValueError, "does not compose with pure data parallelism"),
    ({"tp_size": 0}, ValueError, "ParallelismConfig.tp_size=0 must be an int >= 1"),
    ({"dp_shard_size": "2"}, TypeError, "dp_shard_size"),
    ({"cp_backend": "ring"}, ValueError, "cp_backend"),
    ({"tp_handler": TorchTensorParallelConfig()}, ValueError, "with tp_size=1: the handler configures tensor parallelism"),
    ({"tp_handler": object(), "tp_size": 2}, TypeError, "give a TorchTensorParallelConfig"),
])
def test_bad_sizes_are_refused_at_construction(sizes: dict, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        ParallelismConfig(**sizes)


def test_the_world_check_names_every_size_and_the_world_size() -> None:
    with pytest.raises(ValueError, match=r"dp_replicate_size=2 \* dp_shard_size=3 \* tp_size=1 \* cp_size=1 \* sp_size=1 = 6 "
                                         r"processes, but the world size \(num_processes\) is 4"):
        check_world({"dp_replicate_size": 2, "dp_shard_size": 3}, 4, fsdp=True)
    with pytest.raises(ValueError, match="dp_shard_size=4 shards the model with FSDP2, but FSDP is not on"):
        check_world({"dp_shard_size": 4}, 4, fsdp=False)
    check_world({}, 8, fsdp=False)  # all sizes 1: the whole world
    check_world({"dp_replicate_size": 2, "dp_shard_size": 2}, 4, fsdp=True)


def test_hybrid_shard_is_hsdp_over_machines_times_processes_per_machine() -> None:
    plugin = FullyShardedDataParallelPlugin(sharding_strategy="HYBRID_SHARD")
    state = ProcessState(device=torch.device("cpu"), num_processes=4, num_local_processes=2)
    config = layout._with_hybrid_shard(None, plugin, state)
    assert config is not None and (config.dp_replicate_size, config.dp_shard_size) == (2, 2)
    given = ParallelismConfig(dp_replicate_size=4, dp_shard_size=2)
    assert layout._with_hybrid_shard(given, plugin, state) is given
    with pytest.raises(ValueError, match="asks for HSDP, but .* has not both dp_replicate_size > 1 and dp_shard_size > 1"):
        layout._with_hybrid_shard(ParallelismConfig(dp_shard_size=4), plugin, state)


def test_accelerate_launchs_hybrid_shard_variable_asks_for_hsdp_too() -> None:
    plugin = FullyShardedDataParallelPlugin()
    assert layout._hybrid_asked(plugin, {"ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "HYBRID_SHARD"})
    assert layout._hybrid_asked(plugin, {"ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "4"})
    assert not layout._hybrid_asked(plugin, {"ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "FULL_SHARD"})
    assert not layout._hybrid_asked(None, {"ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "HYBRID_SHARD"})


def test_the_plugin_accepts_hybrid_shard_in_accelerates_spellings_and_refuses_the_other_fsdp1_strategies() -> None:
    from torch.distributed.fsdp import ShardingStrategy

    for spelling in ("HYBRID_SHARD", "hybrid_shard", ShardingStrategy.HYBRID_SHARD, 4):
        assert FullyShardedDataParallelPlugin(sharding_strategy=spelling).sharding_strategy == "HYBRID_SHARD"
    with pytest.raises(ValueError, match="sharding_strategy='FULL_SHARD'.*reshard_after_forward"):
        FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD")


def test_one_process_has_no_mesh_as_in_accelerate() -> None:
    accelerator = accel.Accelerator(cpu=True, parallelism_config=ParallelismConfig())
    assert accelerator.torch_device_mesh is None and accelerator.parallelism_config is not None
    assert accel.Accelerator(cpu=True).parallelism_config is None
    with pytest.raises(TypeError, match="give a ParallelismConfig"):
        accel.Accelerator(cpu=True, parallelism_config={"tp_size": 1})  # type: ignore[arg-type]
