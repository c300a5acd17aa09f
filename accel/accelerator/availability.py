"""Accelerate's `is_*_available` device checks and `is_torch_version`, for scripts that branch on them."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.torch_version import TorchVersion

_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<=": operator.le, "<": operator.lt,
}


def is_cuda_available() -> bool:
    """True when a CUDA (or ROCm) GPU can be used."""
    return torch.cuda.is_available()


def is_xpu_available(check_device: bool = False) -> bool:
    """True when an Intel XPU can be used."""
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def is_npu_available(check_device: bool = False) -> bool:
    """True when an Ascend NPU (torch_npu) can be used."""
    npu = getattr(torch, "npu", None)
    return npu is not None and bool(npu.is_available())


def is_mps_available(min_version: str = "1.12") -> bool:
    """True when Apple's MPS backend can be used."""
    return torch.backends.mps.is_available() and torch.backends.mps.is_built()


def is_torch_version(operation: str, version: str) -> bool:
    """Compare the installed torch's version with `version`: `is_torch_version(">=", "2.4")`."""
    if operation not in _COMPARISONS:
        accepted = ", ".join(_COMPARISONS)
        raise ValueError(f"is_torch_version(operation={operation!r}) is not accepted; use one of {accepted}.")
    return _COMPARISONS[operation](TorchVersion(torch.__version__), version)
