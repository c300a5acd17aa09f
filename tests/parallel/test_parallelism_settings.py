"""The ParallelismConfig sizes as settings: Accelerate's config keys mapped (not dropped), FSDP1's HYBRID_SHARD
as HSDP sizes, accel's own config file written and read back, `accel launch` refusing bad sizes before any
process starts, and a launched script's Accelerator building the mesh from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from launching import launch

from accel.cli.config.file import ConfigFile, load_config, render
from accel.cli.errors import CliError
from accel.cli.launch.plan import plan_launch

ACCELERATE_HSDP = {
    "compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "use_cpu": True, "num_processes": 4,
    "num_machines": 1, "mixed_precision": "no", "fsdp_config": {"fsdp_version": 2},
    "parallelism_config": {
        "parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 1, "parallelism_config_cp_size": 1,
    },
}
SIZES = {"parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 2,
         "parallelism_config_tp_size": 1, "parallelism_config_cp_size": 1}


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_an_accelerate_parallelism_config_maps_to_accels_settings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    values = load_config(write(tmp_path, ACCELERATE_HSDP), "test")
    assert {k: v for k, v in values.items() if k.startswith("parallelism")} == SIZES
    assert values["use_fsdp"] is True
    assert "parallelism" not in capsys.readouterr().err  # nothing dropped


def test_fsdp1_hybrid_shard_becomes_hsdp_sizes_over_the_machines(tmp_path: Path) -> None:
    data = {**ACCELERATE_HSDP, "num_machines": 2, "main_process_ip": "127.0.0.1",
            "fsdp_config": {"fsdp_sharding_strategy": "HYBRID_SHARD"}}
    del data["parallelism_config"]
    values = load_config(write(tmp_path, data), "test")
    assert values["parallelism_config_dp_replicate_size"] == 2 and values["parallelism_config_dp_shard_size"] == 2
    assert values["fsdp_reshard_after_forward"] is True


def test_deepspeed_sequence_parallelism_in_an_accelerate_config_is_refused(tmp_path: Path) -> None:
    data = {**ACCELERATE_HSDP, "parallelism_config": {**ACCELERATE_HSDP["parallelism_config"],
                                                      "parallelism_config_sp_size": 2}}
    with pytest.raises(CliError, match="sp_size=2 with sp_backend 'deepspeed' .* pass a DeepSpeedPlugin"):
        load_config(write(tmp_path, data), "test")


def test_accels_config_file_writes_the_section_and_reads_it_back(tmp_path: Path) -> None:
    text = render({"num_processes": 4, "use_fsdp": True, **SIZES})
    assert yaml.safe_load(text)["parallelism_config"] == SIZES
    path = tmp_path / "accel.yaml"
    path.write_text(text)
    assert {k: v for k, v in load_config(path, "test").items() if k.startswith("parallelism")} == SIZES
    path.write_text(text.replace("parallelism_config_tp_size", "parallelism_config_tp_sise"))
    with pytest.raises(CliError, match="unknown key parallelism_config.parallelism_config_tp_sise; did you mean "
                                       "parallelism_config.parallelism_config_tp_size"):
        load_config(path, "test")


@pytest.mark.parametrize(("values", "words"), [
    ({"num_processes": 2, "use_fsdp": True, **SIZES}, r"= 4 processes, but the world size \(num_processes\) is 2"),
    ({"num_processes": 4, **SIZES}, "dp_shard_size=2 shards the model with FSDP2, but FSDP is not on"),
    ({"num_processes": 2, "use_cpu": True, "parallelism_config_cp_size": 2}, "with use_cpu: context parallelism"),
    ({"num_processes": 4, "parallelism_config_dp_replicate_size": 2, "parallelism_config_tp_size": 2},
     "tensor parallelism does not compose with pure data parallelism"),
])
def test_launch_refuses_bad_sizes_before_any_process_starts(tmp_path: Path, values: dict, words: str) -> None:
    config = ConfigFile(tmp_path / "c.yaml", "--config_file", values, exists=True)
    with pytest.raises(CliError, match=words):
        plan_launch({}, config, "test", gpus=lambda: 0, cores=2)


def test_launch_passes_the_sizes_as_accel_variables(tmp_path: Path) -> None:
    config = ConfigFile(tmp_path / "c.yaml", "--config_file", {"num_processes": 4, "use_fsdp": True}, exists=True)
    plan = plan_launch({"parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 2}, config,
                       "test", gpus=lambda: 0, cores=2)
    assert plan.env["ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "2"
    assert plan.env["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"


def test_a_launched_accelerator_builds_hsdp_from_an_accelerate_config(tmp_path: Path) -> None:
    path = write(tmp_path, ACCELERATE_HSDP)
    import sys

    launcher = [sys.executable, "-m", "accel", "launch", "--config_file", str(path)]
    result = launch(str(Path(__file__).parent / "env_mesh_script.py"), processes=4, launcher=launcher, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.of("mesh") == [[["dp_replicate", "dp_shard"], [2, 2]]] * 4
    assert result.of("placements") == ["(Replicate(), Shard(dim=0))"] * 4


def test_a_script_under_accelerate_launch_builds_hsdp_from_its_parallelism_variables(tmp_path: Path) -> None:
    """`accelerate launch` hands the sizes over as ACCELERATE_USE_PARALLELISM_CONFIG and PARALLELISM_CONFIG_*."""
    import shutil

    accelerate = shutil.which("accelerate")
    assert accelerate is not None, "Accelerate's launcher is part of the test environment"
    data = {**ACCELERATE_HSDP, "fsdp_config": {"fsdp_version": 2, "fsdp_cpu_ram_efficient_loading": False}}
    launcher = [accelerate, "launch", "--config_file", str(write(tmp_path, data))]
    result = launch(str(Path(__file__).parent / "env_mesh_script.py"), processes=4, launcher=launcher, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.of("mesh") == [[["dp_replicate", "dp_shard"], [2, 2]]] * 4
    assert result.of("placements") == ["(Replicate(), Shard(dim=0))"] * 4
