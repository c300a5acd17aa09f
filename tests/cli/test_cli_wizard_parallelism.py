"""`accel config` in a real pseudo-terminal: the device-mesh question after FSDP's on 4 processes, written as
Accelerate's parallelism_config keys and passed on by `accel launch`; nothing asked where nothing can vary."""

from __future__ import annotations

import importlib.util

from pathlib import Path

import yaml

from accel.cli.config.file import ConfigFile, load_config
from accel.cli.launch.plan import plan_launch
from tests.cli.test_cli_wizard import BACKSPACE, ENTER, Wizard


def answer_fsdp(wizard: Wizard, processes: str) -> None:
    wizard.answer("How many machines", ENTER)
    wizard.text("How many training processes", processes)
    wizard.answer("Which precision", ENTER)
    wizard.answer(f"Shard the model over the {processes} processes with FSDP", "y")
    wizard.answer("fsdp_auto_wrap_policy", ENTER)
    wizard.answer("Class names of the transformer blocks", "Block" + ENTER)
    wizard.answer("fsdp_reshard_after_forward", ENTER)
    wizard.answer("fsdp_activation_checkpointing", ENTER)
    wizard.answer("fsdp_cpu_ram_efficient_loading", ENTER)
    wizard.answer("fsdp_state_dict_type", ENTER)


def finish(wizard: Wizard) -> None:
    wizard.answer("Gradient accumulation", ENTER)
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output


def test_hsdp_answers_become_parallelism_config_sizes_that_launch_passes_on(clean_env: dict[str, str],
                                                                           tmp_path: Path) -> None:
    config = tmp_path / "hsdp.yaml"
    wizard = Wizard(config, clean_env)
    answer_fsdp(wizard, "4")
    wizard.answer("Lay the 4 processes out as a device mesh", "y")
    wizard.answer("Tensor-parallel size", ENTER)
    wizard.text("Replicas of the sharded model", "3")  # refused: must leave equal shard groups
    wizard.child.expect("give 1 or one of 2")
    wizard.child.send(BACKSPACE * 8 + "2" + ENTER)
    wizard.answer("Quantize the Linear weights", ENTER)
    finish(wizard)
    written = yaml.safe_load(config.read_text())
    assert written["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 1, "parallelism_config_cp_size": 1,
    }
    plan = plan_launch({}, ConfigFile(config, "--config_file", load_config(config, "test"), exists=True), "test",
                       gpus=lambda: 0, cores=2)
    assert plan.env["ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "2"
    assert plan.env["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"


def test_without_fsdp_tensor_parallelism_spans_all_processes_or_none(clean_env: dict[str, str], tmp_path: Path) -> None:
    """torch cannot replicate split weights with DDP: without FSDP the wizard offers tp 1 or all processes only."""
    config = tmp_path / "tp.yaml"
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.text("How many training processes", "4")
    wizard.answer("Which precision", ENTER)
    wizard.answer("Shard the model over the 4 processes with FSDP", "n")
    if importlib.util.find_spec("deepspeed"):
        wizard.answer("DeepSpeed's ZeRO engine", ENTER)  # no: DDP
    wizard.answer("Lay the 4 processes out as a device mesh", "y")
    wizard.text("Tensor-parallel size", "2")
    wizard.child.expect("give one of 1, 4")
    wizard.child.send(BACKSPACE * 8 + "4" + ENTER)
    wizard.child.expect("bitsandbytes quantization: not asked, tensor parallelism splits the Linear layers")
    finish(wizard)
    written = yaml.safe_load(config.read_text())
    assert written["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 1, "parallelism_config_dp_shard_size": 1,
        "parallelism_config_tp_size": 4, "parallelism_config_cp_size": 1,
    }
