"""The CPU's peak FLOP/s for MFU: one core's matmul rate per second of CPU time, times the cores torch uses.

Why CPU time: a machine whose cores are shared with other programs gives a process only part of
each wall-clock second. A peak timed in wall-clock seconds while they run is that part of the
real one (measured on a shared 2-core Xeon: 13 to 34 GFLOP/s against 290, two torch threads
waiting on each other), and every MFU divided by it later, when the machine is quieter, is
inflated (111% and 337% were printed). A thread's CPU time counts only the time it ran, so FLOPs
per CPU-second of one thread are what one core does, however busy the machine (measured: the
same, or up to a fifth lower where the other work shares the core's caches).

Square matmuls of each of `SIZES` are timed on one thread (torch.set_num_threads(1) for the
measurement, then put back), the fastest kept; `measure_again` keeps the best of all
measurements. The peak of `n` threads is `n` times one core's (the cores' clocks only fall as
more of them work), `n` being torch's threads, at most the physical cores this process may run
on (an SMT sibling shares its core's vector units).
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import torch

SIZES: tuple[int, ...] = (256, 512)
"""Square matmul sizes tried: small enough to take milliseconds, large enough for the BLAS's full speed."""
MEASURED_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
"""Dtypes whose CPU matmul is measured as such."""
FP8_CPU_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float32)
"""What an FP8 matmul runs in on a CPU (no FP8 units: the operands are upcast to one of these)."""
MIN_REPEATS = 3
MIN_S = 0.02
"""Each size is multiplied at least MIN_REPEATS times and for at least MIN_S CPU seconds, the fastest kept..."""
BUDGET_S = 0.2
"""...unless BUDGET_S CPU seconds pass first (a 16-bit matmul without hardware support is slow)."""

_core_rates: dict[torch.dtype, float] = {}
"""The best FLOP/s per CPU-second of one thread measured so far, per dtype (the process's cache)."""


def cpu_peak(compute_dtype: torch.dtype, measure_again: bool = False) -> float | None:
    """Peak FLOP/s of the threads torch uses for matmuls in `compute_dtype`; None for a dtype with no measure.

    Measured once per process and dtype; `measure_again=True` measures again and keeps the best.
    Example: `cpu_peak(torch.float32)` on a 2-core Xeon with AVX-512 is about 2.9e11.
    """
    if compute_dtype in MEASURED_DTYPES:
        rate = core_rate(compute_dtype, measure_again)
    elif compute_dtype.is_floating_point and compute_dtype.itemsize == 1:
        rate = max(core_rate(dtype, measure_again) for dtype in FP8_CPU_DTYPES)
    else:
        return None
    return rate * min(torch.get_num_threads(), physical_cores())


def core_rate(dtype: torch.dtype, measure_again: bool = False) -> float:
    """The best FLOP/s per CPU-second of one thread multiplying `dtype` matrices, measured once (or again)."""
    if measure_again or dtype not in _core_rates:
        _core_rates[dtype] = max(_core_rates.get(dtype, 0.0), _measure_core_rate(dtype))
    return _core_rates[dtype]


def _measure_core_rate(dtype: torch.dtype) -> float:
    """FLOP/s per CPU-second of the fastest matmul of `SIZES`, on one thread, outside autocast and autograd."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            return max(_best_rate(dtype, size) for size in SIZES)
    finally:
        torch.set_num_threads(threads)


def _best_rate(dtype: torch.dtype, size: int) -> float:
    """FLOP/s per CPU-second of the fastest `size` x `size` product of at least `MIN_REPEATS` and `MIN_S` CPU seconds
    (fewer past `BUDGET_S`).

    Many short products, not a few: the first ones after a pause can run at a lower clock (AVX-512 and AMX
    units wake up), and the best is what the core does once they run. The operands come from a private
    generator: the measurement leaves torch's global random stream alone.
    """
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(dtype)
    b = torch.randn(size, size, generator=generator).to(dtype)
    start = time.thread_time()
    torch.mm(a, b)  # the first call sets the BLAS up
    best, repeats, spent = float("inf"), 0, 0.0
    while (repeats < MIN_REPEATS or spent < MIN_S) and spent < BUDGET_S:
        before = time.thread_time()
        torch.mm(a, b)
        best = min(best, time.thread_time() - before)
        repeats, spent = repeats + 1, time.thread_time() - start
    return 2 * size**3 / max(best, 1e-9)


@functools.cache  # read once: every window's MFU asks for it
def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (SMT siblings counted once), from Linux's topology.

    Where the topology cannot be read, each CPU counts as a core (a peak too high: MFU errs low, never high).
    """
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return max(len({_core_of(cpu) for cpu in cpus}), 1)


def _core_of(cpu: int) -> tuple[str, ...]:
    """(package, core) of logical CPU `cpu`; (cpu,) where sysfs does not say."""
    topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    try:
        return ((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip())
    except OSError:
        return (str(cpu),)
