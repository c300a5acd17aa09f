"""`accelerator.device` reads as Accelerate 1.15's, with one process and with two (device_name_script.py runs
both libraries in the same processes): `cpu` for one CPU process, `cpu:0` on every process of a multi-CPU
run (Accelerate's MULTI_CPU takes the index local rank % torch.cpu.device_count(), always 0)."""

from __future__ import annotations

import pytest
from launching import launch


@pytest.mark.parametrize("processes, expected", [(1, "cpu"), (2, "cpu:0")])
def test_the_device_is_named_as_accelerate_names_it(processes: int, expected: str) -> None:
    result = launch("device_name_script.py", processes=processes, timeout=180)
    assert result.returncode == 0, result.stderr[-4000:]
    seen = result.of("device")
    assert len(seen) == processes
    for rank, names in enumerate(seen):
        assert names["accel"] == names["accelerate"], f"rank {rank}"
        assert names["accel"]["accelerator"] == names["accel"]["partial_state"] == expected, f"rank {rank}"
