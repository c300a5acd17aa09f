"""Full precision: fp32 (the base class's behaviour) and fp64."""

from __future__ import annotations

import torch

from accel.backends.base import PrecisionBackend
from accel.backends.half import TruePrecision


class FullPrecision(PrecisionBackend):
    """fp32 weights and compute: every hook is the base class's do-nothing default."""

    name = "no"

    def describe(self) -> str:
        """'fp32 (no mixed precision)': Accelerate's name "no" alone reads as "not running" in a log line."""
        return "fp32 (no mixed precision)"


class DoublePrecision(TruePrecision):
    """64-true: fp64 weights, inputs and compute (for numerics checks)."""

    name = "64-true"
    param_dtype = compute_dtype = torch.float64
