"""`accelerate launch` in a job script: the ACCELERATE_* (and FSDP_*) variables Accelerate's launcher sets are
honoured where Accelerate's Accelerator honours them, a keyword in the code wins over them as in Accelerate,
an ACCEL_* and an ACCELERATE_* variable that disagree are refused naming both, and what accel cannot do
(DeepSpeed, Accelerate's FP8 variables, ...) is refused rather than ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accel import Accelerator, settings
from accel.fsdp.environment import environment_plugin

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from accel import Accelerator

    accelerator = Accelerator()
    seen = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model[0].register_forward_hook(lambda module, args, out: seen.append(str(out.dtype)))
    model = accelerator.prepare(model)
    model(torch.randn(2, 4))
    report = json.dumps({
        "mixed_precision": accelerator.mixed_precision, "inside_forward": seen, "device": str(accelerator.device),
        "num_processes": accelerator.num_processes, "process_index": accelerator.process_index,
        "dynamo_backend": accelerator.dynamo_plugin.backend, "dynamic": accelerator.dynamo_plugin.dynamic,
    })
    with open(f"report_{accelerator.process_index}.json", "w") as file:  # one file per process: stdout interleaves
        file.write(report)
    """
)


def _accelerate_launch(tmp_path: Path, *flags: str) -> list[dict[str, object]]:
    """Run SCRIPT under Accelerate's own launcher (its CLI, installed with the test extra); each process's report."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_", "FSDP_", "TORCHELASTIC_"))}
    root = str(Path(__file__).parents[1])
    env.update(OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--dynamo_backend", "no",
               *flags, str(script)]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(path.read_text()) for path in sorted(tmp_path.glob("report_*.json"))]


def test_accelerate_launch_cpu_bf16_trains_in_bf16(tmp_path: Path) -> None:
    (report,) = _accelerate_launch(tmp_path, "--cpu", "--num_processes", "1", "--mixed_precision", "bf16")
    assert report["mixed_precision"] == "bf16"
    assert report["inside_forward"] == ["torch.bfloat16"]  # the forward ran under bf16 autocast
    assert report["device"] == "cpu" and report["num_processes"] == 1
    assert report["dynamo_backend"] == "no" and report["dynamic"] is False  # the launcher's ACCELERATE_DYNAMO_*


def test_accelerate_launch_multi_process_layout_is_joined(tmp_path: Path) -> None:
    # --multi_gpu starts the processes with torchrun (on this CPU-only machine they join over gloo)
    reports = _accelerate_launch(tmp_path, "--multi_gpu", "--num_processes", "2", "--mixed_precision", "no")
    assert [(r["process_index"], r["num_processes"]) for r in reports] == [(0, 2), (1, 2)]


def test_accelerate_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "EAGER")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "True")
    accelerator = Accelerator()
    assert accelerator.mixed_precision == "bf16" and accelerator.gradient_accumulation_steps == 4
    assert accelerator.dynamo_plugin.backend == "eager" and accelerator.dynamo_plugin.fullgraph is True


def test_a_keyword_wins_over_accelerate_launch_as_in_accelerate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.warns(UserWarning, match="mixed_precision='no' given in the code overrides ACCELERATE_MIXED_PRECISION='bf16'"):
        assert Accelerator(mixed_precision="no").mixed_precision == "no"
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "EAGER")
    with pytest.warns(UserWarning, match="overrides ACCELERATE_DYNAMO_BACKEND='EAGER'"):
        assert Accelerator(dynamo_backend="no").dynamo_plugin.backend == "no"


def test_accel_and_accelerate_variables_that_disagree_are_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.raises(ValueError, match="ACCEL_MIXED_PRECISION='fp16' and ACCELERATE_MIXED_PRECISION='bf16'.*disagree"):
        Accelerator()
    with pytest.raises(ValueError, match="disagree"):  # refused even where a keyword would decide
        Accelerator(mixed_precision="no")
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "bf16-mixed")  # the same value, another spelling: agreed
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "BF16")
    assert Accelerator().mixed_precision == "bf16"


def test_a_bad_accelerate_value_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "zero")
    with pytest.raises(ValueError, match="ACCELERATE_GRADIENT_ACCUMULATION_STEPS='zero'"):
        Accelerator()


def test_fsdp_variables_describe_the_plugin_as_in_accelerate() -> None:
    launched = {  # what `accelerate launch --use_fsdp --fsdp_version 2 ...` sets
        "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "Block,DecoderLayer", "FSDP_RESHARD_AFTER_FORWARD": "false",
        "FSDP_OFFLOAD_PARAMS": "false", "FSDP_MIN_NUM_PARAMS": "100000000", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
        "FSDP_ACTIVATION_CHECKPOINTING": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "false",
        "FSDP_SHARDING_STRATEGY": "FULL_SHARD", "FSDP_SYNC_MODULE_STATES": "true",  # FSDP1's, unread for FSDP2 as there
    }
    plugin = environment_plugin(launched)
    assert plugin.auto_wrap_policy == "transformer_based_wrap"
    assert plugin.transformer_cls_names_to_wrap == ("Block", "DecoderLayer")
    assert plugin.reshard_after_forward is False and plugin.activation_checkpointing is True
    assert plugin.state_dict_type == "FULL_STATE_DICT"
    # FSDP_MIN_NUM_PARAMS, always set by the launcher, is read under size_based_wrap only (as Accelerate reads it)
    sized = environment_plugin({**launched, "FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP"})
    assert sized.min_num_params == 100_000_000 and sized.transformer_cls_names_to_wrap is None
    assert environment_plugin({k: v for k, v in launched.items() if k != "ACCELERATE_USE_FSDP"}) is None
    with pytest.raises(ValueError, match="FSDP_VERSION=1 is refused"):  # accelerate launch's default version
        environment_plugin({**launched, "FSDP_VERSION": "1"})
    with pytest.raises(ValueError, match="ACCEL_FSDP_STATE_DICT_TYPE=.*FSDP_STATE_DICT_TYPE=.*disagree"):
        environment_plugin({**launched, "ACCEL_FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"})


def test_each_accelerate_variable_derives_from_the_setting_name() -> None:
    assert settings.MIXED_PRECISION.accelerate_env_var == "ACCELERATE_MIXED_PRECISION"
    assert settings.USE_CPU.accelerate_env_var == "ACCELERATE_USE_CPU"
    assert settings.DYNAMO_USE_DYNAMIC.accelerate_env_var == "ACCELERATE_DYNAMO_USE_DYNAMIC"
    assert settings.FSDP_SETTINGS_BY_KEY["fsdp_offload_params"].accelerate_env_var == "FSDP_OFFLOAD_PARAMS"
    assert settings.NUM_PROCESSES.accelerate_env_var is None  # the launcher's layout is torchrun's RANK/WORLD_SIZE
    assert settings.SCHEDULER_PER_OPTIMIZER_STEP.accelerate_env_var is None
    assert settings.DEEPSPEED_SETTINGS_BY_KEY["zero_stage"].accelerate_env_var == "ACCELERATE_DEEPSPEED_ZERO_STAGE"
    wrap = settings.FSDP_SETTINGS_BY_KEY["fsdp_transformer_layer_cls_to_wrap"]
    assert wrap.accelerate_env_var == "FSDP_TRANSFORMER_CLS_TO_WRAP"  # Accelerate's variable is not the key in capitals
    assert settings.PARALLELISM_SETTINGS_BY_KEY["parallelism_config_tp_size"].accelerate_env_var == "PARALLELISM_CONFIG_TP_SIZE"


def test_the_settings_with_an_accelerate_variable_are_those_accelerates_accelerator_reads() -> None:
    """Three top-level settings, use_fsdp, and every dynamo_config, fsdp_config, parallelism_config and
    deepspeed_config setting: none other (an FP8 or bnb setting, or the launcher's layout) has one."""
    read = (settings.MIXED_PRECISION, settings.USE_CPU, settings.GRADIENT_ACCUMULATION_STEPS, *settings.DYNAMO_SETTINGS,
            *settings.FSDP_SETTINGS, *settings.PARALLELISM_SETTINGS, *settings.DEEPSPEED_SETTINGS)
    assert {s.name for s in settings.ALL_SETTINGS if s.accelerate_env_var} == {s.name for s in read}
    variables = [s.accelerate_env_var for s in read]
    assert len(set(variables)) == len(variables)  # no two settings share a variable


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ACCELERATE_USE_MEGATRON_LM", "true", "Megatron-LM"),
        ("ACCELERATE_FP8_BACKEND", "TE", "does not read Accelerate's FP8 variables"),
        ("OMPI_COMM_WORLD_SIZE", "2", "started by MPI"),
    ],
)
def test_what_accel_cannot_honour_is_refused(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=f"{variable}.*{message}|{message}"):
        Accelerator()


def test_the_launchers_do_nothing_values_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"ACCELERATE_USE_CPU": "False", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
                        "ACCELERATE_DEBUG_MODE": "true", "ACCELERATE_MIXED_PRECISION": "no"}.items():
        monkeypatch.setenv(name, value)
    assert Accelerator().mixed_precision == "no"
