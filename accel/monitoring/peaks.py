"""The device's peak FLOP/s, the denominator of MFU: a table of known GPUs, or on the CPU measured (cpu_peak.py).

The table holds the dense (no structured sparsity) tensor-core peaks of each GPU's data sheet,
per matmul dtype: "bf16" (also fp16), "fp8", "tf32" (fp32 matmuls where torch allows TF32) and
"fp32". A GPU or dtype missing from the table has no peak: MFU is then left out, unless
ThroughputKwargs(peak_flops=...) gives one.

MFU is a fraction of a physical limit, so `utilization` never gives more than 1: a rate above the
peak means the peak (or the FLOP count) is wrong, and MFU is then unknown (None, with a warning
once), never a figure above 100%.
"""

from __future__ import annotations

import warnings

import torch

from accel.monitoring.cpu_peak import cpu_peak

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


def measured_cpu_peak(compute_dtype: torch.dtype = torch.float32) -> float | None:
    """This CPU's peak FLOP/s for matmuls in `compute_dtype` with torch's threads, measured once (cpu_peak.py)."""
    return cpu_peak(compute_dtype)


def device_peak(
    device: torch.device, compute_dtype: torch.dtype, configured: float | None, measure_again: bool = False
) -> float | None:
    """The peak MFU is measured against: `configured` when given, else the GPU table, else on the CPU measured.

    `measure_again` measures the CPU's peak again (keeping the best), for a rate found above it.
    """
    if configured is not None:
        return configured
    if device.type == "cpu":
        return cpu_peak(compute_dtype, measure_again)
    if device.type == "cuda":
        return table_peak(torch.cuda.get_device_name(device), compute_dtype)
    return None


_said_unknown: set[tuple[str, torch.dtype]] = set()
"""(device type, dtype) whose MFU was found unknown and said so (once each)."""


def utilization(
    flops_per_s: float, device: torch.device, compute_dtype: torch.dtype, configured: float | None
) -> float | None:
    """MFU: `flops_per_s` over the device's peak, a fraction of at most 1; None where there is no peak or the
    rate exceeds it.

    A measured CPU peak below the rate is measured again first (the best of both kept); a rate still
    above the peak is not MFU but a wrong peak or FLOP count, said once per device type and dtype,
    after which the peak is not measured again (that would cost every window a measurement).
    """
    peak = device_peak(device, compute_dtype, configured)
    said = (device.type, compute_dtype) in _said_unknown  # measured again already, in vain: not at every window
    if peak and flops_per_s > peak and configured is None and device.type == "cpu" and not said:
        peak = device_peak(device, compute_dtype, configured, measure_again=True)
    if not peak:
        return None
    if flops_per_s > peak:
        _say_unknown(device, compute_dtype, flops_per_s, peak, configured is not None)
        return None
    return flops_per_s / peak


def _say_unknown(device: torch.device, compute_dtype: torch.dtype, flops_per_s: float, peak: float, configured: bool) -> None:
    """Warn, once per device type and dtype, that MFU is left out because the rate exceeds the peak."""
    if (device.type, compute_dtype) in _said_unknown:
        return
    _said_unknown.add((device.type, compute_dtype))
    source = "ThroughputKwargs(peak_flops=...)" if configured else f"the {device.type} peak for {compute_dtype}"
    warnings.warn(
        f"MFU left out (unknown): {flops_per_s / 1e12:.3g} TFLOP/s were counted, more than {source}, "
        f"{peak / 1e12:.3g} TFLOP/s. Either the peak is too low (give ThroughputKwargs(peak_flops=...)) or the "
        "FLOP count is too high (give flops_per_token=...).",
        stacklevel=2,
    )
