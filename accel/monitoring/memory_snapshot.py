"""A CUDA memory snapshot written when a process runs out of GPU memory, and named in the error.

On with the setting memory_snapshot_on_oom (config key, `accel launch --memory_snapshot_on_oom`,
ACCEL_MEMORY_SNAPSHOT_ON_OOM), on CUDA runs only: torch records the allocator's history from the
Accelerator's construction (`torch.cuda.memory._record_memory_history`: every allocation with its stack, the
last `MAX_ENTRIES`), and an out-of-memory observer (`torch._C._cuda_attach_out_of_memory_observer`, which the
caching allocator calls before it raises) dumps it to `<project_dir or the working directory>/memory_snapshots/
oom-rank<R>.pickle`, says so on stderr, and the OutOfMemoryError that follows carries the path as a note when it
ends the script. Open the file at https://pytorch.org/memory_viz. torchtitan dumps its snapshot the same way.

Recording costs a little on every allocation, so it is off by default; asked for on a run without CUDA it is
refused at construction (there is no CUDA allocator to record).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

MAX_ENTRIES = 100_000
"""Allocator events kept (torchtitan's default): enough for the steps before the failure."""
FOLDER = "memory_snapshots"


class OutOfMemorySnapshot:
    """Records this process's CUDA allocations and dumps them when an allocation fails.

    Args:
        folder: Where the snapshot goes (`memory_snapshots/` of the project).
        rank: This process's rank (the file's name).
    """

    def __init__(self, folder: Path, rank: int) -> None:
        self.path = folder / f"oom-rank{rank}.pickle"
        self.written: Path | None = None

    def start(self) -> None:
        """Record the allocator's history and watch for its out-of-memory events; name the snapshot in an
        OutOfMemoryError that ends the script."""
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer")  # noqa: B009 - CUDA builds only
        attach(self.observe)
        previous = sys.excepthook

        def excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
            if isinstance(error, torch.OutOfMemoryError) and self.written is not None:
                note = f"accel: the CUDA memory snapshot of this failure is {self.written} (open it at https://pytorch.org/memory_viz)"
                if hasattr(error, "add_note"):  # Python 3.11+: printed under the traceback
                    error.add_note(note)
                else:
                    error.args = (f"{error.args[0]}\n{note}" if error.args else note,)
            previous(kind, error, trace)

        sys.excepthook = excepthook

    def observe(self, device: int, asked: int, allocated: int, free: int) -> None:
        """The allocator's out-of-memory callback: dump the snapshot and say where it is."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(self.path))
        self.written = self.path
        print(f"accel: CUDA out of memory on device {device} (asked {asked:,} bytes, {allocated:,} allocated, {free:,} "
              f"free); the memory snapshot is {self.path} (open it at https://pytorch.org/memory_viz)",
              file=sys.stderr, flush=True)


def start_snapshots(project_dir: Any, rank: int, device: torch.device) -> OutOfMemorySnapshot:
    """The snapshot watcher of this process, started; refused on a device that is not CUDA.

    Args:
        project_dir: The Accelerator's project folder (None: the working directory).
        rank: This process's rank.
        device: The Accelerator's device.
    """
    if device.type != "cuda":
        raise ValueError(
            f"memory_snapshot_on_oom=true records CUDA's allocator, and this run's device is {device}: there is no "
            "CUDA memory to snapshot. Turn it off for this run (memory_snapshot_on_oom: false), or run on GPUs."
        )
    snapshot = OutOfMemorySnapshot(Path(project_dir or ".") / FOLDER, rank)
    snapshot.start()
    return snapshot
