"""`accel test` checks every FSDP wrap policy the wizard can write, on a model with the structure the config names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

POLICIES = {
    # the wizard's defaults: transformer blocks by class, names left empty (the model's _no_split_modules)
    "default": (["--fsdp_auto_wrap_policy", "transformer_based_wrap"], "the root and 2 block(s) (Block)"),
    "named": (["--fsdp_auto_wrap_policy", "transformer_based_wrap", "--fsdp_transformer_layer_cls_to_wrap",
               "LlamaDecoderLayer,MLPBlock"], "the root and 4 block(s) (LlamaDecoderLayer, MLPBlock)"),
    "size": (["--fsdp_auto_wrap_policy", "size_based_wrap", "--fsdp_min_num_params", "1000"], "block(s)"),
}


def test_accel_test_passes_for_every_wrap_policy_and_shows_the_units(clean_env: dict[str, str], tmp_path: Path) -> None:
    started = {
        name: subprocess.Popen([sys.executable, "-m", "accel", "test", "--num_processes", "2", "--cpu", "--use_fsdp", *flags],
                               cwd=tmp_path, env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, (flags, _) in POLICIES.items()
    }
    for name, process in started.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, f"{name}:\n{output}"
        units = [line for line in output.splitlines() if line.startswith("[rank 0] ok    sharding: FSDP2")]
        assert len(units) == 1 and POLICIES[name][1] in units[0], f"{name}:\n{output}"
