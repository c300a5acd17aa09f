"""Low-precision storage arithmetic: power-of-two scales, stochastic rounding, fast FP8 upcasts.

These are the element-wise kernels under the O1/O2 storage (weights.py, grads.py, adam.py),
written with plain tensor operations so that they run on any device without a sync.

* :func:`pow2_scale` picks the power of two that puts a tensor's amax just below ``2**15``
  (the top of float16's range is 65504): multiplying by it and by its inverse is exact, so
  a value moves between its float16 storage and float32 without any rounding but the
  storage's own.
* :func:`round_to_half` rounds float32 to float16, stochastically when given a generator:
  the result is the float16 value just below or just above ``x``, with probabilities that
  make it exact in expectation. Round-to-nearest would drop every update smaller than half
  a float16 ulp (about ``2**-12`` relative), which is where AdamW's decay and late,
  small learning rates live.
* :func:`fp8_to_float` upcasts FP8 through float16 bit patterns, several times faster on
  CPU than torch's FP8 -> float32 cast.
"""

from __future__ import annotations

import torch

HALF_TARGET_EXPONENT: int = 15
"""Scaled amaxes land in (2**14, 2**15]: well below float16's 65504, far above its subnormals."""

_MAX_SHIFT = 126
"""Largest |k| of a scale 2**k whose inverse is still a normal float32."""

HALF_DROPPED_BITS = 13
"""float32 has 23 mantissa bits, float16 10: rounding to float16 drops the low 13."""
FP8_DROPPED_BITS = {torch.float8_e4m3fn: 20, torch.float8_e5m2: 21}

_CLEAR_BIT_14 = ~(1 << 14)
_E4M3_HALF_FACTOR = 256.0
"""E4M3 bits read as a float16 give the value times 2**-8."""


def pow2_scale(amax: torch.Tensor, target_exponent: int = HALF_TARGET_EXPONENT) -> torch.Tensor:
    """``2**k`` with ``amax * 2**k`` in ``(2**(target-1), 2**target]``; 1 where amax is 0 or not finite.

    ``k = target - ceil(log2(amax))``. The interval is closed at the top, so a tensor rounded
    into storage with this scale and read back gives the same or a larger ``k``: re-storing
    it only shifts exponents up, which is exact.
    """
    mantissa, exponent = torch.frexp(amax)
    ceil_log2 = exponent - (mantissa == 0.5).to(exponent.dtype)
    shift = (target_exponent - ceil_log2).clamp(-_MAX_SHIFT, _MAX_SHIFT).to(amax.dtype)
    usable = torch.isfinite(amax) & (amax > 0)
    return torch.where(usable, torch.exp2(shift), torch.ones_like(amax))


def random_keys(generator: torch.Generator) -> torch.Tensor:
    """Two int32 keys for one tensor's random bits (:func:`hashed_bits`): one draw from ``generator``,
    on its device."""
    return torch.randint(-(2**31), 2**31, (2,), dtype=torch.int32, generator=generator, device=generator.device)


def hashed_bits(count: int, keys: torch.Tensor, width: int) -> torch.Tensor:
    """``count`` uniform int32 in ``[0, 2**width)`` (``width`` <= 32): element ``i`` is a hash of ``i``
    under ``keys`` (:func:`random_keys`), a counter-based generator like Philox.

    The hash is Chris Wellons' lowbias32 (two multiplies, three xor-shifts; every input bit
    moves every output bit with probability within 0.2% of 1/2) with the second key xored in
    between its rounds, so that two keys never give shifted copies of one sequence. Unlike
    drawing ``count`` values from a torch.Generator (a Mersenne Twister on the CPU, about 3 ns
    per 64 bits there), it is plain int32 arithmetic: the fused kernels compute it inside their
    loop (0.2 ns per element), and eager code on any device gets the same bits.
    """
    index = torch.arange(count, dtype=torch.int32, device=keys.device)
    x = index ^ keys[0]
    x = x ^ ((x >> 16) & 0xFFFF)  # int32 shifts are arithmetic: the mask makes them logical
    x = x * 0x7FEB352D
    x = x ^ ((x >> 15) & 0x1FFFF) ^ keys[1]
    x = x * -0x7B935975  # 0x846CA68B as int32
    x = x ^ ((x >> 16) & 0xFFFF)
    return x if width == 32 else x & ((1 << width) - 1)


def random_low_bits(count: int, width: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """``count`` uniform int32 in ``[0, 2**width)`` on ``device``, from one draw of ``generator``
    (:func:`hashed_bits`)."""
    return hashed_bits(count, random_keys(generator).to(device), width)


def stochastic_truncate_(x: torch.Tensor, dropped_bits: int, generator: torch.Generator) -> torch.Tensor:
    """Round float32 ``x`` in place to ``23 - dropped_bits`` mantissa bits, up with probability
    equal to the dropped part's fraction of one unit of the kept last bit, else down."""
    bits = x.view(torch.int32)
    bits.add_(random_low_bits(x.numel(), dropped_bits, generator, x.device).view(x.shape))
    bits.bitwise_and_(~((1 << dropped_bits) - 1))
    return x


def round_to_half(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """``x`` (float32) in float16: stochastically rounded with ``generator``, else to nearest.

    Stochastic rounding adds uniform noise below float16's last kept bit to the float32 bit
    pattern and truncates: the value rounds up with probability equal to its distance from
    the value below, in ulps. Exact for values in float16's normal range (scale them there
    first, see :func:`pow2_scale`); the rest round to nearest. Overwrites ``x``.
    """
    if generator is not None:
        stochastic_truncate_(x, HALF_DROPPED_BITS, generator)
    return x.to(torch.float16)


def round_to_fp8(x: torch.Tensor, dtype: torch.dtype, limit: float, generator: torch.Generator | None) -> torch.Tensor:
    """Scaled float32 ``x`` in FP8 (clamped to ``limit``): stochastically rounded with
    ``generator`` (exact for FP8's normal range), else to nearest. Overwrites ``x``."""
    if generator is not None:
        stochastic_truncate_(x, FP8_DROPPED_BITS[dtype], generator)
    return x.clamp_(-limit, limit).to(dtype)


def half_to_float(stored: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """float32 ``stored * scale_inv``, as a new tensor.

    The upcast and an in-place multiply: on the CPU about 1.7x faster than one multiply that
    promotes the 16-bit operand element by element, with the same float32 products.
    """
    return stored.to(torch.float32, copy=True).mul_(scale_inv)


def fp8_bits_as_half(q: torch.Tensor) -> torch.Tensor:
    """An FP8 tensor's bits moved into float16 bits: E5M2 exactly, E4M3 as its value times 2**-8.

    E5M2 is the top byte of a float16. E4M3's magnitude bits, moved down one place below its
    sign, land on float16's exponent and mantissa (subnormals included): shift the byte to
    the top, shift right by one with sign extension, clear the copied sign bit.
    """
    bits = q.view(torch.uint8).to(torch.int16).bitwise_left_shift_(8)
    if q.dtype == torch.float8_e5m2:
        return bits.view(torch.float16)
    return bits.bitwise_right_shift_(1).bitwise_and_(_CLEAR_BIT_14).view(torch.float16)


def fp8_to_float(q: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """float32 ``q * scale_inv`` for an E4M3 or E5M2 tensor ``q``, as a new tensor.

    Several times faster on the CPU than torch's FP8 -> float32 cast. E4M3's NaN pattern is
    not kept: FP8 storage holds no NaN except in a step that is skipped, whose ``scale_inv``
    is NaN, so the values read back are NaN anyway.
    """
    factor = scale_inv if q.dtype == torch.float8_e5m2 else scale_inv * _E4M3_HALF_FACTOR
    return half_to_float(fp8_bits_as_half(q), factor)
