"""benchmarks/qlora_fsdp.py's table: bytes per process of each kind, 1 process against N, and the losses."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import qlora_fsdp as bench  # noqa: E402


def _held(scale: float) -> dict[str, int]:
    return {kind: int(1000 * scale) for kind in bench.KINDS}


def test_table_shows_each_kind_the_total_and_the_ratio_of_the_largest_rank() -> None:
    one = {"processes": 1, "bytes": [_held(1)], "losses": [6.0, 5.0]}
    many = {"processes": 2, "bytes": [_held(0.5), {**_held(0.5), "quant state": 1000}], "losses": [6.0, 5.0000005]}
    lines = bench.table(one, many, 2).splitlines()
    assert lines[2] == "| packed 4-bit bases | 1,000 | 500 | 0.50 |"
    assert lines[3] == "| quant state | 1,000 | 500 / 1,000 | 1.00 |"
    assert lines[7] == "| total | 5,000 | 2,500 / 3,000 | 0.60 |"
    assert lines[-1] == "loss after 2 steps: 1 process 5 (from 6.0000), 2 processes 5.0000005; relative difference 1.0e-07"
