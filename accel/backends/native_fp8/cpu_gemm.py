"""FP8 GEMMs on the CPU: exact upcasts and a bf16 (or float32) matrix product.

torch's ``_scaled_mm`` on the CPU has no FP8 kernel of its own: it upcasts both operands to
float32 with a slow element-wise conversion and multiplies (or, on CPUs with AMX-INT8, hands
same-dtype operands to a oneDNN reference kernel ~150x slower still). Measured on a 2-core
Xeon with AMX: 34 ms for a 2048x128 @ 128x512 product that float32 does in 1.1 ms.

This module computes the same thing faster. Every E4M3 and E5M2 value is exactly a bfloat16
(and a float32), so the upcast loses nothing; bit operations on int16 do it several times
faster than torch's cast. The product then runs in bfloat16 where the CPU multiplies bf16 in
hardware (AMX or AVX512-BF16: products of FP8 values are exact, accumulation is float32, the
result is rounded to bf16, 2**-9 relative, far below FP8's own rounding), else in float32.
The dequantization scales are applied to the product, as ``_scaled_mm`` applies them.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from accel.backends.native_fp8.rounding import fp8_to_float

_TO_BF16_SHIFT = {torch.float8_e4m3fn: 4, torch.float8_e5m2: 3}
"""Right shifts that put an FP8 byte's mantissa on top of bfloat16's (4 and 2 mantissa bits)."""
_CLEAR_SIGN_COPIES = {torch.float8_e4m3fn: ~(0xF << 11), torch.float8_e5m2: ~(0x7 << 12)}
"""After the arithmetic shift, the bits between the sign and the magnitude hold copies of the sign: cleared."""
_TO_BF16_FACTOR = {torch.float8_e4m3fn: 2.0**120, torch.float8_e5m2: 2.0**112}
"""bfloat16's exponent bias (127) minus the format's (7, 15)."""


@functools.cache
def compute_dtype() -> torch.dtype:
    """bfloat16 where this CPU multiplies it in hardware (AMX tiles or AVX512-BF16), else float32."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    fast = any(getattr(cpu, name, lambda: False)() for name in checks)
    return torch.bfloat16 if fast else torch.float32


def to_bfloat16(q: torch.Tensor) -> torch.Tensor:
    """An FP8 tensor as bfloat16, exactly, keeping its strides (a transposed view stays one).

    The byte's magnitude bits, moved below its sign so that its mantissa lands on top of
    bfloat16's, read as a bfloat16 give the value times 2**-120 (E4M3) or 2**-112 (E5M2),
    subnormals included; one multiply restores it. Five passes over int16, where torch's own
    FP8 casts (and float16 -> bfloat16) convert element by element, 3-10x slower.
    Infinity and NaN patterns are not kept: an FP8 tensor holds them only in a step whose
    amax is not finite, and such a step is skipped.
    """
    bits = q.view(torch.uint8).to(torch.int16).bitwise_left_shift_(8)
    bits.bitwise_right_shift_(_TO_BF16_SHIFT[q.dtype]).bitwise_and_(_CLEAR_SIGN_COPIES[q.dtype])
    return bits.view(torch.bfloat16).mul_(_TO_BF16_FACTOR[q.dtype])


def upcast(q: torch.Tensor) -> torch.Tensor:
    """An FP8 tensor in :func:`compute_dtype`, exactly."""
    if compute_dtype() == torch.bfloat16:
        return to_bfloat16(q)
    return fp8_to_float(q, torch.ones((), dtype=torch.float32, device=q.device))


def without_autocast() -> contextlib.AbstractContextManager[object]:
    """CPU autocast switched off, where it is on (it would cast the products' operands to its dtype);
    entering torch.autocast costs more than the check, so nothing is entered where it is off."""
    if torch.is_autocast_enabled("cpu"):
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


def cpu_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a_inv: torch.Tensor, scale_b_inv: torch.Tensor, out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(a * scale_a_inv) @ (b * scale_b_inv) (+ bias)`` for operands already :func:`upcast`, in ``out_dtype``.

    Where the product's dtype is ``out_dtype`` the scale is the GEMM's alpha and the bias (in
    ``out_dtype``, as autocast gives nn.Linear its bias) its beta term, both applied to the float32
    accumulator before the one rounding to ``out_dtype`` (as ``_scaled_mm`` applies its scales): no
    pass over the output, one rounding instead of three. A CPU scale is read without a device sync.
    """
    scale = scale_a_inv * scale_b_inv
    with without_autocast():
        if a.dtype == out_dtype and scale.device.type == "cpu":
            if bias is None:
                return torch.addmm(_zero(out_dtype), a, b, beta=0, alpha=scale.item())
            return torch.addmm(bias.to(out_dtype), a, b, alpha=scale.item())
        product = torch.mm(a, b)
    y = dequantize_product(product, scale, out_dtype)
    return y if bias is None else y.add_(bias)


@functools.cache
def _zero(dtype: torch.dtype) -> torch.Tensor:
    """addmm's ignored input (beta=0), broadcast to the product."""
    return torch.zeros((), dtype=dtype)


def dequantize_product(product: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``product * scale`` in ``out_dtype``, the product's own tensor reused where the dtypes agree."""
    if product.dtype == out_dtype:
        return product.mul_(scale)
    # In float32, as a promoting multiply would compute it: an upcast and an in-place multiply
    # are 30x faster on the CPU than one multiply that converts element by element.
    return product.to(torch.float32).mul_(scale).to(out_dtype)


def cpu_scaled_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a_inv: torch.Tensor, scale_b_inv: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """``(a * scale_a_inv) @ (b * scale_b_inv)`` for FP8 ``a`` and ``b``, in ``out_dtype``."""
    return cpu_mm(upcast(a), upcast(b), scale_a_inv, scale_b_inv, out_dtype)
