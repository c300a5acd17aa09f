"""The device's peak FLOP/s, the denominator of MFU: a table of known GPUs, or on the CPU a matmul measured once.

The table holds the dense (no structured sparsity) tensor-core peaks of each GPU's data sheet,
per matmul dtype: "bf16" (also fp16), "fp8", "tf32" (fp32 matmuls where torch allows TF32) and
"fp32". A GPU or dtype missing from the table has no peak: MFU is then left out, unless
ThroughputKwargs(peak_flops=...) gives one.
"""

from __future__ import annotations

import functools
import time

import torch

_T = 1e12
PEAK_FLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    # The more specific names first: "H100 PCIe" before "H100", "L40S" before "L4".
    ("H100 PCIe", {"bf16": 756 * _T, "fp8": 1513 * _T, "tf32": 378 * _T, "fp32": 51 * _T}),
    ("H100 NVL", {"bf16": 835 * _T, "fp8": 1671 * _T, "tf32": 418 * _T, "fp32": 60 * _T}),
    ("H200 NVL", {"bf16": 835 * _T, "fp8": 1671 * _T, "tf32": 418 * _T, "fp32": 60 * _T}),
    ("H100", {"bf16": 989.4 * _T, "fp8": 1978.9 * _T, "tf32": 494.7 * _T, "fp32": 66.9 * _T}),  # SXM
    ("H200", {"bf16": 989.4 * _T, "fp8": 1978.9 * _T, "tf32": 494.7 * _T, "fp32": 66.9 * _T}),  # SXM
    ("B200", {"bf16": 2250 * _T, "fp8": 4500 * _T, "tf32": 1100 * _T, "fp32": 75 * _T}),
    ("A100", {"bf16": 312 * _T, "tf32": 156 * _T, "fp32": 19.5 * _T}),
    ("L40S", {"bf16": 362 * _T, "fp8": 733 * _T, "tf32": 183 * _T, "fp32": 91.6 * _T}),
    ("L4", {"bf16": 121 * _T, "fp8": 242.5 * _T, "tf32": 60 * _T, "fp32": 30.3 * _T}),
)
"""(part of torch.cuda.get_device_name(), dense peak FLOP/s per matmul dtype), first match wins."""


def dtype_column(compute_dtype: torch.dtype) -> str | None:
    """The table column of the dtype matmuls run in ("bf16", "fp8", "tf32", "fp32"), None for others (fp64)."""
    if compute_dtype in (torch.bfloat16, torch.float16):
        return "bf16"
    if compute_dtype.is_floating_point and compute_dtype.itemsize == 1:
        return "fp8"
    if compute_dtype == torch.float32:
        return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    return None


def table_peak(device_name: str, compute_dtype: torch.dtype) -> float | None:
    """The table's peak for a GPU called `device_name` running matmuls in `compute_dtype`, or None.

    Example: `table_peak("NVIDIA H100 80GB HBM3", torch.bfloat16)` is 989.4e12.
    """
    column = dtype_column(compute_dtype)
    for part, peaks in PEAK_FLOPS:
        if part.lower() in device_name.lower():
            return peaks.get(column) if column else None
    return None


@functools.lru_cache(maxsize=1)
def measured_cpu_peak(size: int = 512, repeats: int = 5) -> float:
    """FLOP/s of the fastest of `repeats` fp32 matmuls of `size` x `size` on this CPU, measured once per process.

    A stand-in for the CPU's peak: what its BLAS reaches on a square product, with the threads
    torch uses (on a machine shared with other work, less than the hardware could).
    """
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # the first call sets the BLAS up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / max(best, 1e-9)


def device_peak(device: torch.device, compute_dtype: torch.dtype, configured: float | None) -> float | None:
    """The peak MFU is measured against: `configured` when given, else the GPU table, else on the CPU measured."""
    if configured is not None:
        return configured
    if device.type == "cpu":
        return measured_cpu_peak()
    if device.type == "cuda":
        return table_peak(torch.cuda.get_device_name(device), compute_dtype)
    return None
