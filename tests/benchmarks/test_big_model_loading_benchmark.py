"""benchmarks/big_model_loading.py reads this process's memory from /proc and tabulates the reports."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import big_model_loading as bench  # noqa: E402


def test_memory_is_read_from_proc_and_the_peak_is_at_least_the_current() -> None:
    assert bench.memory_kib("VmHWM") >= bench.memory_kib("VmRSS") > 0


def test_the_table_has_a_row_per_process() -> None:
    report = {"rank": 1, "meta_before_prepare": True, "after_imports_mib": 400.4, "peak_after_loading_mib": 410.0,
              "peak_after_prepare_mib": 600.0, "peak_mib": 900.6}
    table = bench.table({"code | efficient": [report]})
    assert table.splitlines()[-1] == "| code | efficient | 1 | yes | 400 | 410 | 600 | 901 |"
