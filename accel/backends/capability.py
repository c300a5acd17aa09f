"""Can this machine run a dtype fast? Answers with the reason, for warnings and `accel env`."""

from __future__ import annotations

import torch

_NO_FAST_PATH = (
    "this CPU has no native {dtype} matrix instructions ({needs}), so torch emulates {dtype} "
    "matrix products: measured about 100x slower than fp32 on an AVX2-only AMD EPYC"
)
_NEEDS = {torch.bfloat16: "AVX512-BF16 or AMX-BF16", torch.float16: "AVX512-FP16 or AMX-FP16"}


def slow_dtype_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why matrix products in `dtype` are slow on `device`, or None when they are not."""
    if device.type != "cpu" or dtype not in _NEEDS:
        return None
    if _cpu_has_fast_path(dtype):
        return None
    return _NO_FAST_PATH.format(dtype=str(dtype).removeprefix("torch."), needs=_NEEDS[dtype])


def _cpu_has_fast_path(dtype: torch.dtype) -> bool:
    """oneDNN's own check of the CPU's instruction set for `dtype` matrix products."""
    probe = {
        torch.bfloat16: "_is_mkldnn_bf16_supported",
        torch.float16: "_is_mkldnn_fp16_supported",
    }[dtype]
    try:
        return bool(getattr(torch.ops.mkldnn, probe)())
    except (AttributeError, RuntimeError):
        return False


FP8_COMPUTE_CAPABILITY = (8, 9)
"""The first CUDA compute capability with FP8 tensor cores (Ada, sm89; Hopper is sm90)."""


def cuda_fp8_reason(device: torch.device) -> str | None:
    """Why `device` is not a CUDA GPU with FP8 tensor cores, or None when it is."""
    if device.type != "cuda":
        return f"the device is {device.type}, not a CUDA GPU with FP8 (compute capability >= 8.9)"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < FP8_COMPUTE_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        return f"{name} has compute capability {major}.{minor}; FP8 needs 8.9 or newer (Ada, Hopper, Blackwell)"
    return None
