"""`accel launch --dry_run MODEL`: the job's plan and each rank's memory, made in one process on torch's fake
process group, from the same flags and config file a launch reads; nothing runs; a layout that cannot shard is
refused naming the dimension, before any process starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.estimate.models import build_on_meta
from accel.estimate.training import training_bytes


def test_the_plan_of_an_fsdp_config_file_equals_the_formula(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("num_processes: 64\nmixed_precision: bf16\nuse_fsdp: true\n")
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    assert main(["launch", "--config_file", str(config), "--dry_run", "llama3-8b", str(script)]) == 0
    out = capsys.readouterr().out
    assert "llama3-8b, fsdp over 64 processes (dp_shard 64), bf16, AdamW; nothing is run" in out
    first, last = training_bytes(build_on_meta("llama3-8b"), "bf16", "fsdp", 64)[::63]
    from accel.estimate.sizes import convert_bytes

    rows = [line for line in out.splitlines() if line.startswith(("│ 0 ", "│ 63 "))]
    assert len(rows) == 2
    assert convert_bytes(first.total) in rows[0] and convert_bytes(last.total) in rows[1]
    assert "dp_shard 63" in rows[1]
    from accel.estimate.communication import communication_bytes

    sent = communication_bytes(build_on_meta("llama3-8b"), "bf16", "fsdp", 64)
    assert (f"each rank, per optimizer step: all-gather {convert_bytes(sent.all_gather)}, reduce-scatter "
            f"{convert_bytes(sent.reduce_scatter)}") in out


@pytest.mark.parametrize(("flags", "said"), [
    (["--num_processes", "16", "--use_fsdp", "--parallelism_config_tp_size", "16"],
     "this job cannot start: tensor parallelism: tp_size=16 does not divide the model's config.num_key_value_heads=8"),
    (["--num_processes", "8", "--use_fsdp", "--parallelism_config_dp_shard_size", "2",
      "--parallelism_config_tp_size", "3"], "tp_size=3 * cp_size=1 * sp_size=1 = 6 processes, but the world size (num_processes) is 8"),
    (["--num_processes", "6", "--use_fsdp", "--parallelism_config_dp_shard_size", "2",
      "--parallelism_config_tp_size", "3"], "tp_size=3 does not divide layer 'model.layers.0.self_attn.q_proj'"),
    (["--num_processes", "4", "--mixed_precision", "fp8", "--fp8_backend", "te"],
     "fp8_backend 'te': only accel's native FP8 is estimated"),
])
def test_a_layout_that_cannot_shard_is_refused_before_anything_starts(flags: list[str], said: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", *flags, "--dry_run", "llama3-8b"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_from_the_shell_with_tensor_parallelism(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "accel", "launch", "--num_processes", "1024", "--use_fsdp",
                           "--parallelism_config_dp_shard_size", "128", "--parallelism_config_tp_size", "8",
                           "--mixed_precision", "bf16", "--dry_run", "llama3-70b"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tp over 1024 processes (dp_shard 128, tp 8)" in done.stdout
    assert "dp_shard 127, tp 7" in done.stdout and "fake process group of 1024 ranks" in done.stdout
