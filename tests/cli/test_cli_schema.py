"""The settings schema: every spelling of a setting derives from its one name."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.settings import (
    ALL_SETTINGS,
    FP8_SETTINGS,
    MIXED_PRECISION,
    TOP_LEVEL_SETTINGS,
    USE_CPU,
    to_environment,
)
from accel.settings.handlers import fp8_recipe_from_env

SAMPLE_VALUES = {
    "mixed_precision": "bf16", "num_processes": 4, "num_machines": 2, "machine_rank": 1,
    "main_process_ip": "10.0.0.1", "main_process_port": 29501, "use_cpu": True, "gpu_ids": "0,1",
    "gradient_accumulation_steps": 3, "collective_timeout": 90, "rank_exit_grace": 5, "stall_report_after": 20,
    "scheduler_per_optimizer_step": True, "activation_checkpointing": ("Block", "DecoderLayer"), "async_save": True,
    "activation_checkpointing_policy": 0.5, "memory_snapshot_on_oom": True,
    "max_restarts": 2, "monitor_interval": 0.5, "rdzv_backend": "c10d", "rdzv_endpoint": "10.0.0.1:29400",
    "rdzv_timeout": 30, "min_machines": 1, "log_throughput": True, "spike_detection": "checkpoint",
    "fp8_backend": "native", "fp8_format": "E4M3", "fp8_margin": 2,
    "fp8_amax_history_len": 16, "fp8_amax_compute_algo": "most_recent", "fp8_scaling": "current",
    "fp8_backward_override": "dequantized",
    "fp8_optimization_level": "O2", "fp8_use_autocast_during_eval": True, "fp8_exclude_modules": ("lm_head", "a.*"),
    "fp8_small_layer_dim": 512, "fp8_base_precision": "fp16", "fp8_params": True, "fp8_health_interval": 50,
    "dynamo_backend": "inductor", "dynamo_mode": "max-autotune", "dynamo_use_fullgraph": True, "dynamo_use_dynamic": False,
    "dynamo_use_regional_compilation": True,
    "use_fsdp": True, "fsdp_version": 2, "fsdp_auto_wrap_policy": "transformer_based_wrap",
    "fsdp_transformer_layer_cls_to_wrap": ("Block", "DecoderLayer"), "fsdp_min_num_params": 1000,
    "fsdp_reshard_after_forward": False, "fsdp_offload_params": True, "fsdp_state_dict_type": "FULL_STATE_DICT",
    "fsdp_activation_checkpointing": True, "fsdp_activation_checkpointing_offload": True,
    "fsdp_cpu_ram_efficient_loading": True,
    "bnb_mode": "int8", "bnb_dtype": "float16", "bnb_ignore_modules": ("lm_head", "blocks.0"),
    "parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 4,
    "parallelism_config_tp_size": 2, "parallelism_config_cp_size": 1, "parallelism_config_sp_size": 2,
    "parallelism_config_sp_backend": "torch",
    "use_deepspeed": True, "deepspeed_config_file": "ds.json", "zero_stage": 3, "offload_optimizer_device": "cpu",
    "offload_param_device": "nvme", "gradient_clipping": 0.5, "zero3_init_flag": True, "zero3_save_16bit_model": False,
}


def test_top_level_names_are_the_documented_keys() -> None:
    assert [s.name for s in TOP_LEVEL_SETTINGS] == [
        "mixed_precision", "num_processes", "num_machines", "machine_rank", "main_process_ip",
        "main_process_port", "use_cpu", "gpu_ids", "gradient_accumulation_steps", "collective_timeout",
        "rank_exit_grace", "stall_report_after", "scheduler_per_optimizer_step", "activation_checkpointing",
        "activation_checkpointing_policy", "log_throughput", "spike_detection", "memory_snapshot_on_oom", "async_save",
        "max_restarts",
        "monitor_interval", "rdzv_backend", "rdzv_endpoint", "rdzv_timeout", "min_machines",
    ]


def test_every_spelling_derives_from_the_name() -> None:
    for setting in TOP_LEVEL_SETTINGS:
        assert setting.env_var == "ACCEL_" + setting.name.upper()
        assert setting.yaml_key == setting.name
        stem = setting.flag or setting.name
        assert setting.flags[0] == "--" + stem
    assert USE_CPU.flags == ("--cpu",) and USE_CPU.keyword == "cpu"
    assert MIXED_PRECISION.flags == ("--mixed_precision", "--mixed-precision")


def test_recipe_settings_are_the_fp8_recipe_fields() -> None:
    fields = dataclasses.fields(FP8RecipeKwargs)
    assert [s.keyword for s in FP8_SETTINGS] == [f.name for f in fields]
    assert [s.default for s in FP8_SETTINGS] == [f.default for f in fields]
    by_key = {s.yaml_key: s for s in FP8_SETTINGS}
    assert by_key["amax_history_len"].env_var == "ACCEL_FP8_AMAX_HISTORY_LEN"
    assert by_key["amax_history_len"].flags == ("--fp8_amax_history_len", "--fp8-amax-history-len")
    assert by_key["amax_history_len"].yaml_path == "fp8_config.amax_history_len"
    assert by_key["fp8_format"].env_var == "ACCEL_FP8_FORMAT"  # no doubled prefix
    assert by_key["fp8_format"].flags[0] == "--fp8_format"


def test_every_value_survives_its_environment_variable() -> None:
    assert set(SAMPLE_VALUES) == {s.name for s in ALL_SETTINGS}
    environ = to_environment(SAMPLE_VALUES)
    assert {s.name: s.from_env(environ) for s in ALL_SETTINGS} == SAMPLE_VALUES


def test_fp8_recipe_from_env() -> None:
    assert fp8_recipe_from_env({}) is None
    assert fp8_recipe_from_env({"ACCEL_MIXED_PRECISION": "fp8"}) is None
    recipe = fp8_recipe_from_env({"ACCEL_FP8_BACKEND": "NATIVE", "ACCEL_FP8_EXCLUDE_MODULES": "lm_head, blocks.*"})
    assert recipe == FP8RecipeKwargs(backend="native", exclude_modules=("lm_head", "blocks.*"))
    assert recipe.explicit_fields == {"backend", "exclude_modules"}


@pytest.mark.parametrize(
    ("variable", "text", "expected"),
    [
        ("ACCEL_FP8_MARGIN", "-1", "ACCEL_FP8_MARGIN=-1 must be an int >= 0"),
        ("ACCEL_FP8_AMAX_HISTORY_LEN", "many", "ACCEL_FP8_AMAX_HISTORY_LEN='many' is not an integer"),
        ("ACCEL_FP8_BACKEND", "tee", "Did you mean 'te'?"),
        ("ACCEL_FP8_BACKWARD_OVERRIDE", "fp32", "ACCEL_FP8_BACKWARD_OVERRIDE='fp32'"),
        ("ACCEL_FP8_FORMAT", "E5M2", "ACCEL_FP8_FORMAT='E5M2' is not supported"),
        ("ACCEL_FP8_USE_AUTOCAST_DURING_EVAL", "maybe", "ACCEL_FP8_USE_AUTOCAST_DURING_EVAL='maybe' is not a boolean"),
    ],
)
def test_fp8_recipe_from_env_names_the_bad_variable(variable: str, text: str, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        fp8_recipe_from_env({variable: text})
    assert str(info.value).startswith(variable)
    assert expected in str(info.value)


@pytest.mark.fresh_interpreter
def test_schema_and_cli_import_without_torch() -> None:
    code = "import sys, accel.settings, accel.cli.main; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
