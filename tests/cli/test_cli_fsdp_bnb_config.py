"""FSDP (use_fsdp, fsdp_config) and bitsandbytes (bnb_config) settings: schema, config file, Accelerate's
config, launch flags and environment, and the Accelerator that a launched script builds from them."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel.cli.config import from_accelerate as accelerate_config
from accel.cli.config.check import probe
from accel.cli.config.file import ConfigFile, load_config, render
from accel.cli.errors import CliError
from accel.cli.launch.plan import plan_launch
from accel.fsdp import CONFIG_KEYS, FullyShardedDataParallelPlugin
from accel.kwargs_handlers import BitsandbytesKwargs
from accel.settings import BNB_SETTINGS, FSDP_OPTION_SETTINGS, USE_FSDP, to_environment
from accel.settings.handlers import bnb_options_from_env, fsdp_fields_from_env

SCRIPTS = Path(__file__).parent / "scripts"
ACCELERATE_FSDP = {
    "compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "use_cpu": True, "num_processes": 2,
    "mixed_precision": "no", "main_training_function": "main",
    "fsdp_config": {
        "fsdp_version": 2, "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_min_num_params": 10,
        "fsdp_reshard_after_forward": False, "fsdp_state_dict_type": "FULL_STATE_DICT",
        "fsdp_offload_params": False, "fsdp_activation_checkpointing": True, "fsdp_cpu_ram_efficient_loading": False,
    },
}


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def sharding_reports(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line[9:]) for line in result.stdout.splitlines() if line.startswith("SHARDING ")]
    return sorted(lines, key=lambda r: r["rank"])


# ------------------------------------------------------------------ the schema
def test_fsdp_settings_are_accelerates_keys_with_the_plugins_fields_and_defaults() -> None:
    plugin = FullyShardedDataParallelPlugin()
    assert [s.yaml_key for s in FSDP_OPTION_SETTINGS] == list(CONFIG_KEYS)
    assert [s.keyword for s in FSDP_OPTION_SETTINGS] == list(CONFIG_KEYS.values())
    assert {s.keyword: s.default for s in FSDP_OPTION_SETTINGS} == {f: getattr(plugin, f) for f in CONFIG_KEYS.values()}
    wrap = FSDP_OPTION_SETTINGS[1]
    assert (wrap.yaml_path, wrap.flags[0], wrap.env_var) == (
        "fsdp_config.fsdp_auto_wrap_policy", "--fsdp_auto_wrap_policy", "ACCEL_FSDP_AUTO_WRAP_POLICY")
    assert (USE_FSDP.yaml_path, USE_FSDP.flags[0], USE_FSDP.env_var) == ("use_fsdp", "--use_fsdp", "ACCEL_USE_FSDP")


def test_bnb_settings_are_the_handlers_fields() -> None:
    fields = dataclasses.fields(BitsandbytesKwargs)
    assert [s.keyword for s in BNB_SETTINGS] == [f.name for f in fields]
    assert [s.default for s in BNB_SETTINGS] == [f.default for f in fields]
    assert [(s.yaml_path, s.flags[0], s.env_var) for s in BNB_SETTINGS][0] == (
        "bnb_config.mode", "--bnb_mode", "ACCEL_BNB_MODE")


def test_the_environment_builds_the_plugin_only_with_use_fsdp() -> None:
    values = {"fsdp_auto_wrap_policy": "transformer_based_wrap", "fsdp_transformer_layer_cls_to_wrap": ("Block",)}
    assert fsdp_fields_from_env(to_environment(values)) is None
    fields = fsdp_fields_from_env(to_environment({**values, "use_fsdp": True}))
    assert FullyShardedDataParallelPlugin(**fields) == FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"])


def test_the_environment_builds_the_bnb_options() -> None:
    assert bnb_options_from_env({}) is None
    options = bnb_options_from_env(to_environment({"bnb_dtype": "bf16", "bnb_ignore_modules": ("lm_head",)}))
    assert options == BitsandbytesKwargs(mode="nf4-dq", dtype="bfloat16", ignore_modules=["lm_head"])


@pytest.mark.parametrize(("variable", "text", "expected"), [
    ("ACCEL_FSDP_VERSION", "1", "ACCEL_FSDP_VERSION=1 is refused: accel shards with FSDP2 only"),
    ("ACCEL_FSDP_AUTO_WRAP_POLICY", "transformer_wrap", "Did you mean 'transformer_based_wrap'?"),
    ("ACCEL_FSDP_STATE_DICT_TYPE", "LOCAL_STATE_DICT", "accepted values: 'SHARDED_STATE_DICT', 'FULL_STATE_DICT'"),
])
def test_bad_fsdp_variables_name_themselves(variable: str, text: str, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        fsdp_fields_from_env({"ACCEL_USE_FSDP": "1", variable: text})
    assert str(info.value).startswith(variable) and expected in str(info.value)


def test_an_unknown_bnb_mode_names_the_closest() -> None:
    with pytest.raises(ValueError, match="ACCEL_BNB_MODE='nf5' is not accepted.*Did you mean 'nf4'"):
        bnb_options_from_env({"ACCEL_BNB_MODE": "nf5"})


# ------------------------------------------------------------------ config files
def test_config_file_round_trip(tmp_path: Path) -> None:
    data = {"num_processes": 2, "use_cpu": True, "use_fsdp": True,
            "fsdp_config": {"fsdp_auto_wrap_policy": "transformer_based_wrap",
                            "fsdp_transformer_layer_cls_to_wrap": ["Block"], "fsdp_offload_params": True},
            "bnb_config": {"mode": "fp4", "dtype": "float32", "ignore_modules": ["lm_head"]}}
    values = load_config(write(tmp_path / "a.yaml", data), "test")
    assert values["fsdp_transformer_layer_cls_to_wrap"] == ("Block",) and values["bnb_mode"] == "fp4"
    (tmp_path / "b.yaml").write_text(render(values))
    assert yaml.safe_load((tmp_path / "b.yaml").read_text()) == data
    assert load_config(tmp_path / "b.yaml", "test") == values


@pytest.mark.parametrize(("data", "expected"), [
    ({"fsdp_config": {"fsdp_version": 1}}, "fsdp_config.fsdp_version=1 is refused: accel shards with FSDP2 only"),
    ({"fsdp_config": {"fsdp_auto_wrap": "size_based_wrap"}}, "did you mean fsdp_config.fsdp_auto_wrap_policy?"),
    ({"fsdp_config": {"fsdp_auto_wrap_policy": "SIZE_WRAP"}}, "Did you mean 'size_based_wrap'?"),
    ({"bnb_config": {"mode": "nf5"}}, "bnb_config.mode='nf5' is not accepted"),
    ({"bnb_config": {"ignore_modules": "lm_head"}}, "bnb_config.ignore_modules='lm_head' is not accepted"),
    ({"bnb_config": "nf4"}, "bnb_config must be a mapping of BitsandbytesKwargs fields"),
])
def test_bad_config_values_name_the_file_and_key(tmp_path: Path, data: dict[str, Any], expected: str) -> None:
    path = write(tmp_path / "bad.yaml", data)
    with pytest.raises(CliError) as info:
        load_config(path, "test")
    assert str(info.value).startswith(str(path)) and expected in str(info.value)


def test_accelerate_fsdp_config_maps_to_use_fsdp_and_its_options(tmp_path: Path, capsys) -> None:
    values = load_config(write(tmp_path / "acc.yaml", ACCELERATE_FSDP), "test")
    assert values["use_fsdp"] is True and values["fsdp_auto_wrap_policy"] == "size_based_wrap"
    assert values["fsdp_reshard_after_forward"] is False and values["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    assert capsys.readouterr().err == ""  # nothing lost, nothing to say


def test_accelerate_fsdp1_config_runs_as_fsdp2_and_says_so(tmp_path: Path, capsys) -> None:
    section = {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_transformer_layer_cls_to_wrap": "Block",
               "fsdp_sharding_strategy": "SHARD_GRAD_OP", "fsdp_backward_prefetch": "BACKWARD_PRE",
               "fsdp_use_orig_params": True, "fsdp_sync_module_states": True, "fsdp_forward_prefetch": False,
               "fsdp_min_num_params": 0, "fsdp_offload_params": False}
    values = load_config(write(tmp_path / "acc.yaml", {**ACCELERATE_FSDP, "fsdp_config": section}), "test")
    assert values["fsdp_reshard_after_forward"] is False and values["fsdp_transformer_layer_cls_to_wrap"] == ("Block",)
    assert "fsdp_min_num_params" not in values
    err = capsys.readouterr().err
    assert "without fsdp_version, which Accelerate reads as FSDP1; accel runs FSDP2" in err
    assert "ignoring" not in err  # every FSDP1 option here is one FSDP2 does by itself


def test_accelerate_fsdp_version_1_is_refused(tmp_path: Path) -> None:
    data = {**ACCELERATE_FSDP, "fsdp_config": {"fsdp_version": 1}}
    with pytest.raises(CliError, match="fsdp_config.fsdp_version=1 is refused: accel shards with FSDP2 only"):
        load_config(write(tmp_path / "acc.yaml", data), "test")


def test_accelerate_fsdp_without_a_gpu_needs_use_cpu(tmp_path: Path) -> None:
    data = {k: v for k, v in ACCELERATE_FSDP.items() if k != "use_cpu"}
    with pytest.raises(CliError, match="distributed_type: FSDP, but torch sees no GPU.*set `use_cpu: true`"):
        accelerate_config.translate(data, tmp_path / "acc.yaml", "test", gpus=lambda: 0)


def test_an_fsdp_config_without_fsdp_is_refused(tmp_path: Path) -> None:
    data = {**ACCELERATE_FSDP, "distributed_type": "MULTI_CPU"}
    with pytest.raises(CliError, match=r"does not run, so nothing was started: fsdp_config \(distributed_type is not FSDP\)"):
        load_config(write(tmp_path / "acc.yaml", data), "test")


# ------------------------------------------------------------------ accel launch
def test_fsdp_flags_without_use_fsdp_are_refused(run_accel, show_env_script: Path, one_error_line) -> None:
    result = run_accel("launch", "--fsdp_auto_wrap_policy", "size_based_wrap", str(show_env_script))
    assert result.returncode != 0
    assert "--fsdp_auto_wrap_policy set FSDP options, which only apply with use_fsdp" in one_error_line(result)


@pytest.mark.parametrize(("flags", "expected"), [
    (["--use_fsdp", "--fsdp_version", "1"], "--fsdp_version=1 is refused: accel shards with FSDP2 only"),
    (["--use_fsdp", "--fsdp_min_num_params", "5"], "min_num_params is read only with auto_wrap_policy="),
])
def test_launch_refuses_before_starting(run_accel, show_env_script: Path, one_error_line, flags, expected) -> None:
    result = run_accel("launch", "--num_processes", "2", "--cpu", *flags, str(show_env_script))
    assert result.returncode != 0 and "SHOW" not in result.stdout
    assert expected in one_error_line(result)


@pytest.mark.parametrize(("values", "expected"), [
    ({"bnb_mode": "int8", "use_fsdp": True}, "BitsandbytesKwargs(mode='int8') with fsdp_plugin (use_fsdp) cannot run"),
    ({"bnb_mode": "int8", "bnb_dtype": "bfloat16"}, "the int8 modes (LLM.int8()) quantize activations through float16"),
    ({"bnb_mode": "nf4", "mixed_precision": "fp8"}, "with mixed_precision='fp8' cannot run: both replace"),
    ({"bnb_mode": "nf4", "use_fsdp": True, "fsdp_cpu_ram_efficient_loading": True},
     "cpu_ram_efficient_loading=True) cannot run: accel quantizes the Linear layers in prepare"),
    ({"bnb_mode": "nf4", "parallelism_config_tp_size": 2}, "with tensor parallelism (tp_size=2) cannot run"),
    ({"mixed_precision": "fp8", "parallelism_config_tp_size": 2}, "cannot run with tensor parallelism (tp_size > 1)"),
])
def test_the_configuration_check_builds_quantizer_and_plugin(values: dict[str, Any], expected: str) -> None:
    """What `accel launch` runs in a child before any process starts (and `accel config` before writing)."""
    with pytest.raises(CliError) as info:
        probe(to_environment({"num_processes": 2, **values}), True, "all", "nothing was started")
    assert "cannot run on cpu" in str(info.value) and expected in str(info.value)


def test_fsdp_config_unused_without_use_fsdp_is_named(tmp_path: Path, capsys) -> None:
    config = ConfigFile(tmp_path / "c.yaml", "--config_file", {"fsdp_offload_params": True}, exists=True)
    plan = plan_launch({}, config, "test", gpus=lambda: 0, cores=2)
    assert "fsdp_config.fsdp_offload_params from" in capsys.readouterr().err
    assert "ACCEL_FSDP_OFFLOAD_PARAMS" not in plan.env and "ACCEL_USE_FSDP" not in plan.env


def test_launch_environment_carries_fsdp_and_bnb(tmp_path: Path) -> None:
    values = {"num_processes": 2, "use_fsdp": True, "fsdp_transformer_layer_cls_to_wrap": ("Block", "Layer"),
              "fsdp_auto_wrap_policy": "transformer_based_wrap", "bnb_ignore_modules": ("lm_head",)}
    plan = plan_launch({}, ConfigFile(tmp_path / "c.yaml", "--config_file", values, exists=True), "test",
                       gpus=lambda: 0, cores=2)
    assert {k: v for k, v in plan.env.items() if "FSDP" in k or "BNB" in k} == {
        "ACCEL_USE_FSDP": "true", "ACCEL_FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP": "Block,Layer",
        "ACCEL_FSDP_AUTO_WRAP_POLICY": "transformer_based_wrap", "ACCEL_BNB_IGNORE_MODULES": "lm_head"}


def test_the_launch_plan_passes_use_fsdp_with_one_process_on_without_a_word(tmp_path: Path, capsys) -> None:
    """The Accelerator says that there is nothing to shard (it must for a plain `python script.py`);
    the launcher saying it too would say it twice in a launch."""
    config = ConfigFile(tmp_path / "c.yaml", "--config_file", {}, exists=False)
    plan = plan_launch({"use_fsdp": True}, config, "test", gpus=lambda: 0, cores=2)
    assert plan.env["ACCEL_USE_FSDP"] == "true"
    assert capsys.readouterr().err == ""


NOTHING_TO_SHARD = "with one process: there is nothing to shard, so the model trains unsharded"
ONE_PROCESS_FSDP_SCRIPT = """\
import sys
from torch import nn
from accel import Accelerator, FullyShardedDataParallelPlugin

plugin = FullyShardedDataParallelPlugin() if "--plugin" in sys.argv else None
accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
model = accelerator.prepare(nn.Linear(4, 2))
print("fsdp:", accelerator.fsdp_plugin is not None, "processes:", accelerator.num_processes, flush=True)
"""


@pytest.mark.parametrize("how", ["flags", "config file", "plain python"])
def test_one_process_with_fsdp_says_there_is_nothing_to_shard_once(
    run_accel, clean_env: dict[str, str], tmp_path: Path, how: str
) -> None:
    """`accel launch --use_fsdp --num_processes 1`, a config with distributed_type FSDP and one process, and
    `python script.py` with an FSDP plugin in the code: the model trains unsharded, and the warning is said
    once, by the script's Accelerator."""
    script = tmp_path / "train.py"
    script.write_text(ONE_PROCESS_FSDP_SCRIPT)
    if how == "flags":
        result = run_accel("launch", "--use_fsdp", "--num_processes", "1", "--cpu", str(script))
    elif how == "config file":
        config = tmp_path / "fsdp.yaml"
        config.write_text("distributed_type: FSDP\nnum_processes: 1\nuse_cpu: true\nfsdp_config:\n  fsdp_version: 2\n")
        result = run_accel("launch", "--config_file", str(config), str(script))
    else:
        result = subprocess.run([sys.executable, str(script), "--plugin"], cwd=tmp_path, env=clean_env,
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["fsdp: True processes: 1"]
    assert result.stderr.count("nothing to shard") == 1, result.stderr  # in whatever words
    assert "UserWarning: FullyShardedDataParallelPlugin (or use_fsdp) " + NOTHING_TO_SHARD in result.stderr


def test_the_accelerator_builds_plugin_and_quantizer_from_the_environment(monkeypatch) -> None:
    """No plugin and no handler in the code: ACCEL_USE_FSDP / ACCEL_FSDP_* and ACCEL_BNB_* decide."""
    from accel import Accelerator

    environ = to_environment({"use_fsdp": True, "fsdp_auto_wrap_policy": "size_based_wrap", "fsdp_min_num_params": 7})
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert Accelerator().fsdp_plugin == FullyShardedDataParallelPlugin(auto_wrap_policy="size_based_wrap",
                                                                       min_num_params=7)
    given = FullyShardedDataParallelPlugin()
    with pytest.warns(UserWarning, match="the fsdp_plugin given in the code overrides the one from ACCEL_USE_FSDP"):
        assert Accelerator(fsdp_plugin=given).fsdp_plugin is given
    monkeypatch.delenv("ACCEL_USE_FSDP")
    assert Accelerator().fsdp_plugin is None  # the fsdp_config options alone do not shard
    monkeypatch.setenv("ACCEL_BNB_MODE", "fp4")
    monkeypatch.setenv("ACCEL_BNB_IGNORE_MODULES", "head")
    assert Accelerator().quantizer.options == BitsandbytesKwargs(mode="fp4", ignore_modules=["head"])


def test_an_accelerate_fsdp_config_runs_sharded(run_accel, tmp_path: Path) -> None:
    """The script has no plugin in its code: the Accelerator builds it from what the config file said."""
    config = write(tmp_path / "acc.yaml", ACCELERATE_FSDP)
    reports = sharding_reports(run_accel("launch", "--config_file", str(config), str(SCRIPTS / "sharding_from_env.py")))
    assert [r["sharded"] for r in reports] == [True, True]
    assert {r["distributed_type"] for r in reports} == {"FSDP"}
    plugin = reports[0]["plugin"]
    assert {k: plugin[k] for k in ("fsdp_version", "auto_wrap_policy", "min_num_params", "reshard_after_forward",
                                   "state_dict_type", "activation_checkpointing")} == {
        "fsdp_version": 2, "auto_wrap_policy": "size_based_wrap", "min_num_params": 10,
        "reshard_after_forward": False, "state_dict_type": "FULL_STATE_DICT", "activation_checkpointing": True}


def test_config_default_writes_fsdp_and_bnb_flags(run_accel, tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    result = run_accel("config", "default", "--config_file", str(path), "--num_processes", "2", "--use_fsdp",
                       "--fsdp_auto_wrap_policy", "SIZE_BASED_WRAP", "--fsdp_min_num_params", "1000")
    assert result.returncode == 0, result.stderr
    written = yaml.safe_load(path.read_text())
    assert written["use_fsdp"] is True
    assert written["fsdp_config"] == {"fsdp_auto_wrap_policy": "size_based_wrap", "fsdp_min_num_params": 1000}
    refused = run_accel("config", "default", "--config_file", str(tmp_path / "e.yaml"), "--bnb_mode", "nf4",
                        "--fsdp_offload_params")
    assert refused.returncode != 0 and "add --use_fsdp or drop them" in refused.stderr
    assert not (tmp_path / "e.yaml").exists()


def test_an_fsdp1_strategy_without_an_fsdp2_equivalent_is_refused(tmp_path: Path) -> None:
    data = {**ACCELERATE_FSDP, "fsdp_config": {"fsdp_sharding_strategy": "NO_SHARD"}}
    with pytest.raises(CliError, match="fsdp_sharding_strategy=NO_SHARD has no FSDP2 equivalent.*use DDP"):
        load_config(write(tmp_path / "acc.yaml", data), "test")
