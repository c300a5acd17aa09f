"""O1/O2 with two processes (accel launch, gloo on the CPU): the backend averages the FP8
gradients DDP cannot see and copies process 0's compact weights, so the replicas stay equal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "data_parallel.py"


def test_replicas_stay_equal_under_o1_and_o2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accel", "launch", "--num_processes", "2", "--cpu", str(SCRIPT)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for level in ("O1", "O2"):
        assert f"{level}: replicas equal True, loss falls True" in result.stdout, result.stdout + result.stderr[-3000:]
