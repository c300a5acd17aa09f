"""benchmarks/parallelism.py measures the layouts that fit the process count, and adds the tensor-parallel
rows (TP alone, FSDP2 + TP, HSDP + TP) when given a tp size."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import parallelism as bench  # noqa: E402


def test_data_parallel_layouts_by_process_count() -> None:
    assert bench.layouts(2, 1) == {"ddp": (None, False), "fsdp2": ({"dp_shard_size": 2}, True)}
    assert bench.layouts(4, 1)["hsdp"] == ({"dp_replicate_size": 2, "dp_shard_size": 2}, True)


def test_a_tp_size_adds_the_tensor_parallel_rows() -> None:
    assert bench.layouts(2, 2)["tp2"] == ({"tp_size": 2}, False)
    assert bench.layouts(4, 2)["tp2"] == ({"dp_shard_size": 2, "tp_size": 2}, True)
    assert bench.layouts(8, 2)["hsdp+tp2"] == ({"dp_replicate_size": 2, "dp_shard_size": 2, "tp_size": 2}, True)
    assert "tp3" not in bench.layouts(4, 3)  # 3 does not divide 4
