"""`accel estimate-memory`: Accelerate's loading table, the same text as Accelerate's own command prints for
the same model, and the per-rank training table, for a local transformers folder, a preset and a function."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from accel.cli.main import main

TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 3, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 300}


@pytest.fixture
def llama_folder(tmp_path: Path) -> Path:
    from transformers import LlamaConfig

    folder = tmp_path / "tiny-llama"
    LlamaConfig(**TINY_LLAMA).save_pretrained(folder)
    return folder


def accelerates_table(folder: Path, dtypes: list[str], monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> str:
    """What Accelerate's `estimate_command` prints for `folder`: its own code throughout, but for the Hub
    lookup (which needs the network), replaced by building the model from the folder as it would."""
    from accelerate import init_empty_weights
    from accelerate.commands import estimate
    from transformers import AutoConfig, AutoModel

    def from_folder(model_name: str, library_name: str, trust_remote_code: bool = False,
                    access_token: str | None = None) -> torch.nn.Module:
        with init_empty_weights():
            return AutoModel.from_config(AutoConfig.from_pretrained(model_name), dtype=torch.float32)

    monkeypatch.setattr(estimate, "create_empty_model", from_folder)
    estimate.estimate_command(argparse.Namespace(model_name=str(folder), library_name="transformers", dtypes=dtypes,
                                                 trust_remote_code=False))
    return capsys.readouterr().out


def test_the_loading_table_is_accelerates(llama_folder: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for dtypes in (["float32", "float16", "int8", "int4"], ["float16"]):
        theirs = accelerates_table(llama_folder, dtypes, monkeypatch, capsys)
        assert main(["estimate-memory", str(llama_folder), "--dtypes", *dtypes]) == 0
        ours = capsys.readouterr().out
        assert ours == theirs and "Training using Adam" in ours


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["estimate-memory", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_llama3_8b_on_8_ranks_matches_zero_3_accounting(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama 3 8B has 8,030,261,248 parameters in 291 tensors; fp32 AdamW on 8 FSDP ranks: 16 bytes a parameter
    divided by 8 (every dimension divides by 8), plus a 4-byte step per tensor; bf16-true halves it."""
    found = _json(capsys, "llama3-8b", "--training", "--layout", "fsdp", "--num_processes", "8",
                  "--mixed_precision", "no", "bf16-true", "--device_memory", "16GiB")
    count, tensors = 8_030_261_248, 291
    no, true = found["training"]
    assert no["parameters"] == no["gradients"] == count * 4 // 8
    assert no["optimizer"] == count * 8 // 8 + 4 * tensors
    assert no["total"] == count * 16 // 8 + 4 * tensors and no["fits"] is True  # 14.96 GiB
    assert true["total"] == count * 8 // 8 + 4 * tensors
    ddp = _json(capsys, "llama3-8b", "--training", "--num_processes", "2", "--mixed_precision", "bf16",
                "--device_memory", "80GB")["training"][0]
    assert ddp["buffers"] == ddp["gradients"] == count * 4 and ddp["fits"] is False  # DDP's buckets: one more copy
    hsdp = _json(capsys, "llama3-8b", "--training", "--layout", "hsdp", "--num_processes", "64", "--dp_shard_size", "8",
                 "--mixed_precision", "no")["training"][0]
    assert hsdp["total"] == no["total"]  # 8 groups of 8 shards hold what 8 FSDP ranks hold


def test_the_example_gpt_preset(capsys: pytest.CaptureFixture[str]) -> None:
    """The example GPT (about 0.8M parameters): its fp32 AdamW state is 16 bytes a parameter plus a step per
    tensor, and its 8x64 activations are what tests/estimate measured for it."""
    from accel.bench.gpt import GPT, GPTConfig

    model = GPT(GPTConfig())
    count, tensors = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
    [row] = _json(capsys, "gpt", "--training", "--mixed_precision", "no", "--batch_size", "8", "--seq_len", "64",
                  "--cpu")["training"]
    assert row["parameters"] + row["gradients"] + row["optimizer"] == 16 * count + 4 * tensors
    assert row["activations"] == 17572356


def build_tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.Linear(20, 3))


def test_a_function_builds_the_model_on_the_meta_device(capsys: pytest.CaptureFixture[str]) -> None:
    found = _json(capsys, f"{Path(__file__)}:build_tiny", "--dtypes", "float32", "--training", "--optimizer", "sgd")
    assert found["loading"][0]["Total Size"] == "1.11 KB"  # (10 * 20 + 20 + 20 * 3 + 3) * 4 = 1,132 bytes
    assert found["training"][0]["parameters"] == 1132 and found["training"][0]["optimizer"] == 0


def test_activations_join_the_total_and_checkpointing_shrinks_them(llama_folder: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(llama_folder), "--training", "--mixed_precision", "no", "fp8-native", "--batch_size", "2", "--seq_len",
            "32"]
    plain, native = _json(capsys, *argv)["training"]
    state = plain["parameters"] + plain["gradients"] + plain["optimizer"] + plain["buffers"]
    assert plain["activations"] > 0 and plain["total"] == state + plain["activations"]
    assert native["activations"] is None and native["total"] is None  # FP8's activations: not estimated, not guessed
    checkpointed = _json(capsys, *argv, "--activation_checkpointing")["training"][0]
    assert 0 < checkpointed["activations"] < plain["activations"]


@pytest.mark.parametrize(("argv", "said"), [
    (["llama3-8b", "--training", "--batch_size", "2"], "--batch_size 2 --seq_len None: give both"),
    (["llama3-8b", "--training", "--layout", "hsdp", "--num_processes", "6", "--dp_shard_size", "4"],
     "layout='hsdp' needs shard_size, a divisor of processes=6 (got 4)"),
    (["no-such-model-here"], "is not a preset (gpt, llama3-8b, llama3-70b), a folder with a config.json"),
    (["accel.bench.gpt:GPT"], "GPT() must build the model without arguments"),
    (["llama3-8b", "--training", "--dp_shard_size", "8"], "--dp_shard_size 8 is for --layout hsdp"),
    (["gpt", "--training", "--batch_size", "2", "--seq_len", "65"], "sequence length 65 exceeds block_size 64"),
    (["gpt", "--training", "--batch_size", "2", "--seq_len", "8", "--mixed_precision", "no", "16-true", "--cpu"],
     None),
    (["llama3-8b", "--device_memory", "lots"], "--device_memory 'lots' is not a size"),
    (["llama3-8b", "--library_name", "timm"], "--library_name timm is not estimated yet"),
    (["llama3-8b", "--training", "--mixed_precision", "fp8"], "precision='fp8' is not estimated"),
    (["tests.cli.test_cli_estimate:nothing_here"], "has no function 'nothing_here'"),
])
def test_bad_input_is_one_line_naming_it(argv: list[str], said: str | None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    if said is None:  # a case that must run, beside the refusals
        assert main(["estimate-memory", *argv]) == 0, capsys.readouterr().err
        return
    assert main(["estimate-memory", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accel estimate-memory: ") and said in err and "Traceback" not in err


def test_without_transformers_a_preset_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name, *a))
    assert main(["estimate-memory", "llama3-8b"]) == 2
    assert "need transformers (pip install transformers)" in capsys.readouterr().err
    assert main(["estimate-memory", "gpt", "--dtypes", "float32"]) == 0  # the example GPT needs no transformers


def test_a_config_file_gives_the_layout_processes_and_precision(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from accel.estimate.models import build_on_meta
    from accel.estimate.training import training_bytes

    config = tmp_path / "config.yaml"
    config.write_text("num_processes: 8\nmixed_precision: bf16\nuse_fsdp: true\n")
    found = _json(capsys, "llama3-8b", "--training", "--config_file", str(config))
    assert found["layout"] == "fsdp over 8 processes (dp_shard 8)"
    [row] = found["training"]
    expected = training_bytes(build_on_meta("llama3-8b"), "bf16", "fsdp", 8)[0]
    assert (row["precision"], row["total"]) == ("bf16", expected.total)
    accelerate = tmp_path / "accelerate.yaml"  # Accelerate's own config, as `accelerate config` writes it
    accelerate.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 8\n"
                          "mixed_precision: bf16\nfsdp_config:\n  fsdp_version: 2\n")
    assert _json(capsys, "llama3-8b", "--training", "--config_file", str(accelerate))["training"] == [row]
    smaller = _json(capsys, "llama3-8b", "--training", "--config_file", str(config), "--num_processes", "4")
    assert smaller["layout"] == "fsdp over 4 processes (dp_shard 4)"  # a flag wins over the file


def test_tensor_parallelism_from_the_launch_flags_is_planned(capsys: pytest.CaptureFixture[str]) -> None:
    from accel.estimate.models import build_on_meta
    from accel.estimate.plan import plan_layout
    from accel.parallel.config import ParallelismConfig

    found = _json(capsys, "llama3-8b", "--training", "--mixed_precision", "bf16", "--num_processes", "8",
                  "--use_fsdp", "--parallelism_config_dp_shard_size", "2", "--parallelism_config_tp_size", "4")
    assert found["layout"] == "tp over 8 processes (dp_shard 2, tp 4)"
    first, _ = plan_layout(lambda: build_on_meta("llama3-8b"), ParallelismConfig(dp_shard_size=2, tp_size=4), 8,
                           "bf16")
    assert found["training"][0]["total"] == first.held.total


def test_the_communication_per_step_is_communication_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    from accel.estimate.communication import communication_bytes
    from accel.estimate.models import build_on_meta

    rows = _json(capsys, "llama3-8b", "--training", "--layout", "hsdp", "--num_processes", "16", "--dp_shard_size", "8",
                 "--mixed_precision", "bf16", "fp8-native")["training"]
    sent = communication_bytes(build_on_meta("llama3-8b"), "bf16", "hsdp", 16, 8)
    assert rows[0]["communication"] == {"all_reduce": sent.all_reduce, "all_gather": sent.all_gather,
                                        "reduce_scatter": sent.reduce_scatter, "sent": round(sent.ring_bytes)}
    # two bf16 gathers (forward, backward) weigh one float32 reduce-scatter; the replicas all-reduce one shard of 8
    assert sent.all_gather == sent.reduce_scatter > 0 and sent.all_reduce == sent.reduce_scatter // 8
    assert rows[1]["communication"] is None  # FP8's: not estimated, not guessed
    assert main(["estimate-memory", "llama3-8b", "--training", "--layout", "fsdp", "--num_processes", "8",
                 "--mixed_precision", "bf16"]) == 0
    assert "Communication per rank and optimizer step" in capsys.readouterr().out


def test_zero_and_tensor_parallel_communication_reach_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    from accel.estimate.communication import communication_bytes
    from accel.estimate.communication_zero import ZeroOptions
    from accel.estimate.models import build_on_meta

    [row] = _json(capsys, "llama3-8b", "--training", "--num_processes", "64", "--use_deepspeed", "--zero_stage", "3",
                  "--mixed_precision", "bf16")["training"]
    sent = communication_bytes(build_on_meta("llama3-8b"), "bf16", "zero3", 64, zero=ZeroOptions())
    assert (row["communication"]["all_gather"], row["communication"]["reduce_scatter"]) == (sent.all_gather,
                                                                                          sent.reduce_scatter)
    tp = ["gpt", "--training", "--num_processes", "2", "--parallelism_config_tp_size", "2", "--mixed_precision", "no"]
    assert main(["estimate-memory", *tp]) == 2  # the example GPT has no tp_plan: refused by name
    assert "has no tp_plan" in capsys.readouterr().err
    llama = ["llama3-8b", "--training", "--num_processes", "8", "--use_fsdp", "--parallelism_config_dp_shard_size", "2",
             "--parallelism_config_tp_size", "4", "--mixed_precision", "bf16"]
    assert _json(capsys, *llama)["training"][0]["communication"] is None  # activations move: needs a micro-batch
    [row] = _json(capsys, *llama, "--batch_size", "1", "--seq_len", "64")["training"]
    sent = communication_bytes(build_on_meta("llama3-8b"), "bf16", "tp", 8, tp_size=4, batch_size=1, seq_len=64)
    assert row["communication"]["all_reduce"] == sent.all_reduce > 0
