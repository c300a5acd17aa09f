"""`accelerator.profile()` with `ProfileKwargs(output_trace_dir=...)` writes Accelerate's file, `profile_<rank>.json`:
a real torch.profiler Chrome trace, under the same name Accelerate gives it (run side by side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
import torch
from {package} import Accelerator
from {package}.utils import ProfileKwargs

accelerator = Accelerator(cpu=True, kwargs_handlers=[ProfileKwargs(record_shapes=True, output_trace_dir=sys.argv[1])])
with accelerator.profile():
    torch.randn(16, 16) @ torch.randn(16, 16)
"""


def _run(package: str, folder: Path) -> list[str]:
    """Run the script with `package` (accel or accelerate) in a fresh process; the files it wrote."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(package=package), str(folder)], env=env, capture_output=True, text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(p.name for p in folder.iterdir())


def test_the_trace_has_accelerates_file_name_and_holds_the_profiled_operators(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    assert _run("accel", tmp_path / "accel") == _run("accelerate", tmp_path / "accelerate") == ["profile_0.json"]
    trace = json.loads((tmp_path / "accel" / "profile_0.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::mm" in names
