"""Bad input to tensor parallelism, refused on real processes before anything is split (messages name what would work)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed" / "two_processes"))
from launching import launch  # noqa: E402

HERE = Path(__file__).parent


def test_refusals() -> None:
    done = launch(str(HERE / "tensor_refusals_script.py"), processes=2, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    expected = {
        "fp8": ["backend='native'", "tensor parallelism", "mixed_precision='bf16'"],
        "bnb": ["mode='nf4'", "tp_size=2", "one or the other"],
        "no_tp": ["without 'tp'"],
        "replicate_only": ["dp_replicate_size=2", "dp_shard_size"],
        "mesh_size": ["holds 2 processes, but 4 run"],
        "indivisible": ["tp_size=2", "layer '0'", "out_features is 15", "3, 5, 15"],
        "no_plan": ["no tp_plan", "TorchTensorParallelConfig(plan="],
        "heads": ["config.num_key_value_heads=1"],
    }
    for name, parts in expected.items():
        for message in done.of(name):
            assert message is not None, f"{name} was not refused"
            for part in parts:
                assert part in message, (name, part, message)
    assert done.of("left_whole") == [True, True]
    assert done.of("prepared") == [0, 0]
