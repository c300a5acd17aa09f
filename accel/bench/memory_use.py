"""Memory figures of one bench case: peak memory while it trains, and bytes of state per parameter.

Peak memory on CUDA is torch's own allocator peak. A CPU has no allocator statistics in torch,
so on Linux it is the growth of the process's peak resident set (VmHWM, which writing "5" to
/proc/self/clear_refs resets) over the resident set when the case starts, after freed memory
was given back to the system; elsewhere it is not measured (None).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from pathlib import Path

import torch
from torch import nn

from accel.estimate.measure import storage_bytes

_PROC = Path("/proc/self")


class PeakMemory:
    """Measures the peak memory of what runs between `start()` and `stop()` on `device`, in bytes."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._baseline = 0

    def start(self) -> None:
        """Forget the previous peak and note where memory stands now."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self._baseline = torch.cuda.memory_allocated(self.device)
            return
        _release_freed_memory()
        if _reset_peak_rss():
            self._baseline = _status_bytes("VmRSS") or 0

    def stop(self) -> int | None:
        """Peak bytes used above the baseline since `start()`; None where it cannot be measured."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) - self._baseline
        peak = _status_bytes("VmHWM") if self.device.type == "cpu" else None
        return None if peak is None else max(peak - self._baseline, 0)


def available_bytes(device: torch.device) -> int | None:
    """Memory free for more work on `device`, in bytes: CUDA's free memory, or the system's MemAvailable on a
    Linux CPU; None where it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes held by the model's parameters and buffers and the optimizer's state (no gradients).

    Each storage is counted once, so tied or shared tensors are not counted twice.
    """
    tensors: list[torch.Tensor] = [*model.parameters(), *model.buffers()]
    for state in optimizer.state.values():
        tensors.extend(value for value in state.values() if isinstance(value, torch.Tensor))
    return storage_bytes(tensors)


def _reset_peak_rss() -> bool:
    """Reset the process's peak resident set (Linux >= 4.0); False where that is not possible."""
    try:
        (_PROC / "clear_refs").write_text("5")
    except OSError:
        return False
    return _status_bytes("VmHWM") is not None


def _status_bytes(key: str) -> int | None:
    """A `kB` figure of /proc/self/status in bytes, or None where there is none."""
    try:
        text = (_PROC / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return None


def _release_freed_memory() -> None:
    """Give memory freed by earlier cases back to the system (glibc keeps it otherwise)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is not None:
        trim(0)
