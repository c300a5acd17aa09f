"""FP8Gradient: a parameter's gradient held in FP8, from backward until the optimizer step (O1/O2).

The FP8 layer's backward hands its float32 weight (and bias) gradient to :meth:`FP8Gradient.add`
instead of to autograd, so ``param.grad`` stays None and the gradient takes one byte per
value. Each write is scaled by its own amax (current scaling, as MS-AMP scales its FP8
gradients): the scale fits this tensor, whatever the previous step's was.

Accumulation (several micro-batches, or a layer called twice in one forward): the running
FP8 gradient is upcast, the new float32 gradient is added to it, and the sum is cast back
with the sum's amax. So every micro-batch's gradient enters in full precision and only the
running sum is rounded, once per micro-batch: the error stays one FP8 rounding of the sum
(up to 2**-4 relative for E4M3), not one per term.

A non-finite gradient leaves ``step_amax`` NaN or inf and ``scale_inv`` NaN: the step is
skipped, and anything read from the gradient (clipping's norm) is NaN too.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from accel.backends.native_fp8 import fused
from accel.backends.native_fp8.cpu_gemm import dequantize_product
from accel.backends.native_fp8.formats import E4M3, cast_to_fp8, fp8_max
from accel.backends.native_fp8.rounding import fp8_to_float
from accel.backends.native_fp8.scaling import raw_scale, tensor_amax

GRADIENT_DTYPE: torch.dtype = E4M3
"""FP8 format of stored weight gradients: per-tensor current scaling makes range a non-issue,
so the format with more mantissa wins (MS-AMP's choice too), whatever the recipe's format."""

_STATE_KEYS = ("data", "scale_inv", "step_amax")


class FP8Gradient:
    """One parameter's gradient in FP8 with a per-tensor scale; empty (``data is None``) after a step."""

    def __init__(self, device: torch.device, dtype: torch.dtype = GRADIENT_DTYPE) -> None:
        self.dtype = dtype
        self._limit = fp8_max(dtype)
        self._numerator = torch.tensor(self._limit, dtype=torch.float32, device=device)
        self._zero = torch.zeros((), dtype=torch.float32, device=device)
        self.data: torch.Tensor | None = None
        self.scale_inv = torch.ones((), dtype=torch.float32, device=device)
        self.step_amax = self._zero
        """Largest |value| written since the last step: NaN or inf if any write held one."""
        self.last_amax = self._zero
        self.last_scale_inv = self.scale_inv

    def add(self, grad: torch.Tensor) -> None:
        """Add float32 ``grad`` (consumed: it is overwritten) to the stored gradient."""
        if self.data is not None:
            grad = grad.add_(self.dequantize())
        amax = tensor_amax(grad)
        scale = raw_scale(amax, self._numerator)
        self.data = cast_to_fp8(grad, scale, self.dtype)
        self._record(amax, scale)

    def add_product(self, product: torch.Tensor, factor: torch.Tensor | None) -> None:
        """Add the gradient ``product * factor`` (gemm.weight_gradient_product; ``factor`` None:
        ``product`` is the float32 gradient). On the CPU, into an empty store, one fused kernel
        dequantizes, measures and casts it (fused.py), with :meth:`add`'s numbers."""
        if factor is None:
            self.add(product)
        elif self.data is None and fused.supports(product):
            self.data, self.step_amax, self.scale_inv = fused.gradient_to_fp8(
                product, factor, self._numerator, self.step_amax, self.dtype
            )
        else:
            self.add(dequantize_product(product, factor, torch.float32))

    def _record(self, amax: torch.Tensor, scale: torch.Tensor) -> None:
        """Keep the scale of the FP8 data just written (NaN if its amax was not finite) and fold in its amax."""
        finite = torch.isfinite(amax)
        self.scale_inv = torch.where(finite, scale.reciprocal(), torch.full_like(scale, torch.nan))
        self.step_amax = torch.maximum(self.step_amax, amax)

    def dequantize(self) -> torch.Tensor:
        """The stored gradient in float32 (a new tensor). Needs ``data``."""
        assert self.data is not None
        return fp8_to_float(self.data, self.scale_inv)

    def take(self) -> torch.Tensor | None:
        """The stored gradient in float32, leaving this empty (``step_amax`` is kept for the step)."""
        if self.data is None:
            return None
        grad = self.dequantize()
        self.data = None
        return grad

    def found_nonfinite(self) -> torch.Tensor:
        """0-dim bool tensor: did a gradient written since the last step hold NaN or inf?"""
        return ~torch.isfinite(self.step_amax)

    def end_step(self) -> None:
        """Drop the gradient (used or skipped) and publish this step's amax and scale as ``last_*``."""
        self.data = None
        self.last_amax, self.last_scale_inv = self.step_amax, self.scale_inv
        self.step_amax = self._zero

    def to(self, device: torch.device) -> None:
        """Move everything to ``device``."""
        for name in ("_numerator", "_zero", "scale_inv", "step_amax", "last_amax", "last_scale_inv"):
            setattr(self, name, getattr(self, name).to(device))
        if self.data is not None:
            self.data = self.data.to(device)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The gradient in progress (a checkpoint inside an accumulation window); empty when none."""
        if self.data is None:
            return {}
        return {"data": self.data, "scale_inv": self.scale_inv, "step_amax": self.step_amax}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict`; an empty state leaves no gradient."""
        if not state:
            self.data = None
            return
        if set(state) != set(_STATE_KEYS) or state["data"].dtype != self.dtype:
            raise ValueError(
                f"FP8 gradient state has keys {sorted(state)} and dtype {state['data'].dtype if 'data' in state else None}; "
                f"expected keys {sorted(_STATE_KEYS)} and dtype {self.dtype}"
            )
        device = self._zero.device
        self.data = state["data"].to(device)
        self.scale_inv = state["scale_inv"].to(device, torch.float32)
        self.step_amax = state["step_amax"].to(device, torch.float32)
