"""`accel config` in a real pseudo-terminal: the FSDP and bitsandbytes questions, and the round trip
wizard answers -> config.yaml -> accel launch -> the Accelerator's plugin (and the quantizer's options)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from accel.cli.config.file import ConfigFile, load_config
from accel.cli.launch.plan import plan_launch
from accel.kwargs_handlers import BitsandbytesKwargs
from accel.settings.handlers import bnb_options_from_env
from tests.cli.test_cli_wizard import DOWN, ENTER, Wizard

SCRIPT = Path(__file__).parent / "scripts" / "sharding_from_env.py"


def launch(config: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """`accel launch --config_file CONFIG sharding_from_env.py`: what each process's Accelerator built."""
    result = subprocess.run([sys.executable, "-m", "accel", "launch", "--config_file", str(config), str(SCRIPT)],
                            env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line[9:]) for line in result.stdout.splitlines() if line.startswith("SHARDING ")]
    return sorted(lines, key=lambda r: r["rank"])


def test_fsdp_answers_reach_the_accelerators_plugin(clean_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "fsdp.yaml"
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.text("How many training processes", "2")
    wizard.answer("Which precision", ENTER)
    wizard.answer("Shard the model over the 2 processes with FSDP", "y")
    wizard.answer("fsdp_auto_wrap_policy", ENTER)  # transformer_based_wrap, the first
    wizard.answer("Class names of the transformer blocks", "Block" + ENTER)
    wizard.answer("fsdp_reshard_after_forward", "n")
    wizard.answer("fsdp_activation_checkpointing", "y")
    wizard.answer("fsdp_cpu_ram_efficient_loading", "y")
    wizard.answer("fsdp_state_dict_type", DOWN + ENTER)
    wizard.child.expect("Quantize the Linear weights with bitsandbytes")
    wizard.answer("int8 .*FSDP shards the 4-bit modes only", ENTER)  # shown, not choosable; the answer: no
    wizard.answer("Gradient accumulation", ENTER)
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    written = yaml.safe_load(config.read_text())
    assert written["use_fsdp"] is True and written["num_processes"] == 2
    assert written["fsdp_config"] == {
        "fsdp_version": 2, "fsdp_auto_wrap_policy": "transformer_based_wrap",
        "fsdp_transformer_layer_cls_to_wrap": ["Block"], "fsdp_reshard_after_forward": False,
        "fsdp_activation_checkpointing": True, "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_state_dict_type": "FULL_STATE_DICT",
    }
    reports = launch(config, clean_env)
    assert [r["sharded"] for r in reports] == [True, True]
    assert reports[0]["plugin"] == reports[1]["plugin"] == {
        "fsdp_version": 2, "auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": ["Block"],
        "min_num_params": None, "reshard_after_forward": False, "cpu_offload": False,
        "state_dict_type": "FULL_STATE_DICT", "activation_checkpointing": True, "activation_checkpointing_offload": False,
        "cpu_ram_efficient_loading": True,
    }


def test_bnb_answers_reach_the_accelerators_quantizer(clean_env: dict[str, str], tmp_path: Path) -> None:
    """The int8 modes compute in float16 only: the other dtypes are shown with why, and skipped by the cursor."""
    config = tmp_path / "bnb.yaml"
    wizard = Wizard(config, clean_env)
    wizard.answer("How many machines", ENTER)
    wizard.answer("How many training processes", ENTER)
    wizard.answer("Which precision", ENTER)
    wizard.answer("Quantize the Linear weights with bitsandbytes", DOWN * 5 + ENTER)  # no, nf4, ..., fp4-dq, int8
    wizard.answer("bfloat16 \\(the int8 modes compute in float16 only", DOWN + ENTER)  # default, float16
    wizard.answer("Modules to keep unquantized", "head, blocks.0" + ENTER)
    wizard.answer("Gradient accumulation", ENTER)
    wizard.answer("Compile the model", ENTER)
    status, output = wizard.finish()
    assert status == 0, output
    written = yaml.safe_load(config.read_text())
    assert written["bnb_config"] == {"mode": "int8", "dtype": "float16", "ignore_modules": ["head", "blocks.0"]}
    assert "use_fsdp" not in written
    # what accel launch hands the script (tests/cli/test_cli_fsdp_bnb_config.py launches such a script)
    plan = plan_launch({}, ConfigFile(config, "--config_file", load_config(config, "test"), exists=True), "test",
                       gpus=lambda: 0, cores=2)
    assert bnb_options_from_env(plan.env) == BitsandbytesKwargs(mode="int8", dtype="float16",
                                                                ignore_modules=["head", "blocks.0"])
