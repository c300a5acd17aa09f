"""The example GPT trains sharded under `accel launch --num_processes 2 --use_fsdp`, with no plugin in its code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"
SUMMARY = re.compile(r"done: (\d+) steps .* precision (\S+) \| train loss ([\d.]+) -> ([\d.]+)")


def test_example_trains_sharded_from_the_launch_flags(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # no config file: the flags alone decide
    result = subprocess.run(
        [sys.executable, "-m", "accel", "launch", "--num_processes", "2", "--use_fsdp",
         "--fsdp_auto_wrap_policy", "transformer_based_wrap", "--fsdp_transformer_layer_cls_to_wrap", "Block",
         str(SCRIPT), "--steps", "8", "--batch_size", "4", "--eval_interval", "0", "--report_dir", "",
         "--output_dir", str(tmp_path / "model")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert "| 2 process(es) |" in first and first.endswith("distributed_type FSDP"), first
    match = SUMMARY.search(result.stdout)
    assert match is not None, result.stdout
    steps, precision, loss_first, loss_last = match.groups()
    assert (int(steps), precision) == (8, "no")
    assert float(loss_last) < float(loss_first) - 0.5
    weights = load_file(tmp_path / "model" / "model.safetensors")  # gathered from the shards by save_model
    assert weights["lm_head.weight"].shape[0] > 0 and "blocks.0.attn.qkv.weight" in weights
