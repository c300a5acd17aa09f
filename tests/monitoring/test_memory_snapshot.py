"""memory_snapshot_on_oom: a CUDA run that runs out of GPU memory writes the allocator's snapshot to
memory_snapshots/oom-rank<R>.pickle and names it, on stderr and in the error that ends the script.

Here (no GPU) torch's CUDA allocator is stood in for by fakes that behave as torch's functions do: recording is
switched on with `max_entries`, the out-of-memory observer is called with (device, asked, allocated, free) before
the OutOfMemoryError is raised, and `_dump_snapshot` writes a pickle where it is told. The GPU-marked test runs
the real allocator."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Accelerator
from accel.monitoring import memory_snapshot
from accel.monitoring.memory_snapshot import start_snapshots


class _FakeAllocator:
    """torch's recording switch, observer registry and snapshot dump, as the CUDA build has them."""

    def __init__(self) -> None:
        self.recording: dict[str, Any] | None = None
        self.observers: list[Any] = []

    def record(self, enabled: Any = "all", **options: Any) -> None:
        self.recording = options

    def dump(self, path: str) -> None:
        with open(path, "wb") as file:
            pickle.dump({"segments": [], "device_traces": [[{"action": "oom"}]]}, file)

    def fail(self, asked: int) -> None:
        """What the caching allocator does when it cannot allocate: tell the observers, then raise."""
        for observer in self.observers:
            observer(0, asked, 7 << 30, 1 << 20)
        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {asked} bytes.")


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> _FakeAllocator:
    fake = _FakeAllocator()
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", fake.record)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", fake.dump)
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", fake.observers.append, raising=False)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    return fake


def test_an_out_of_memory_error_writes_the_snapshot_and_names_it(
    allocator: _FakeAllocator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = start_snapshots(tmp_path, rank=3, device=torch.device("cuda", 0))
    assert allocator.recording == {"max_entries": memory_snapshot.MAX_ENTRIES}
    with pytest.raises(torch.OutOfMemoryError) as caught:
        allocator.fail(2 << 30)
    path = tmp_path / "memory_snapshots" / "oom-rank3.pickle"
    assert pickle.loads(path.read_bytes())["device_traces"] == [[{"action": "oom"}]]
    said = capsys.readouterr().err
    assert str(path) in said and "asked 2,147,483,648 bytes" in said and "memory_viz" in said
    sys.excepthook(caught.type, caught.value, caught.tb)  # what Python does with an error that ends the script
    assert f"the CUDA memory snapshot of this failure is {path}" in caught.value.__notes__[0]
    assert snapshot.written == path


def test_a_run_without_cuda_is_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="memory_snapshot_on_oom=true records CUDA's allocator, and this run's device "
                                         "is cpu"):
        start_snapshots(tmp_path, rank=0, device=torch.device("cpu"))
    code = "from accel import Accelerator; Accelerator(cpu=True)"
    done = subprocess.run([sys.executable, "-c", code], env={**_environ(), "ACCEL_MEMORY_SNAPSHOT_ON_OOM": "true"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "memory_snapshot_on_oom=true records CUDA's allocator" in done.stderr


def test_off_by_default_nothing_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *a, **k: pytest.fail("recorded"))
    assert Accelerator(cpu=True).memory_snapshot is None


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")
def test_on_a_gpu_the_real_allocator_writes_the_snapshot(tmp_path: Path) -> None:
    script = ("import torch\nfrom accel import Accelerator\nAccelerator(project_dir='.')\n"
              "free, total = torch.cuda.mem_get_info()\nkeep = torch.empty(free // 2, dtype=torch.uint8, device='cuda')\n"
              "torch.empty(total, dtype=torch.uint8, device='cuda')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**_environ(), "ACCEL_MEMORY_SNAPSHOT_ON_OOM": "true"})
    path = tmp_path / "memory_snapshots" / "oom-rank0.pickle"
    assert done.returncode != 0 and "OutOfMemoryError" in done.stderr
    assert f"the CUDA memory snapshot of this failure is {path.relative_to(tmp_path)}" in done.stderr
    assert pickle.loads(path.read_bytes())["segments"]
