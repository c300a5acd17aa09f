"""The arithmetic the fused CPU kernels trace (fused.py, fused_adam.py): rounding without bit casts.

Each function takes and gives float32 tensors and uses only operations inductor turns into
vectorized loops: multiplies, adds, comparisons, floor, frexp; no bit casts, which inductor
vectorizes poorly. Every one of them gives, bit for bit, what the eager kernel it replaces gives
(cast_to_fp8 and the upcasts, rounding.stochastic_truncate_, rounding.pow2_scale), as
tests/backends/native_fp8/test_fused*.py check.

* Rounding to nearest-even on a grid of ``bits`` significant bits is Veltkamp's splitting:
  with ``c = a * (2**(24 - bits) + 1)``, ``c - (c - a)`` is ``a`` so rounded. Below a
  format's smallest normal value the grid has a fixed spacing ``2**e``, and ``(a + m) - m``
  with ``m = 1.5 * 2**(e + 23)`` rounds to it.
* Stochastic rounding adds random bits below the last kept bit and truncates, as
  stochastic_truncate_ does on the bit pattern: ``floor(a / ulp + noise * 2**-dropped) * ulp``,
  with ``ulp`` the spacing of ``a``'s binade (its power of two by Veltkamp's splitting to one bit).
"""

from __future__ import annotations

import torch

from accel.backends.native_fp8.formats import E4M3, E5M2
from accel.backends.native_fp8.rounding import HALF_DROPPED_BITS, HALF_TARGET_EXPONENT, hashed_bits

SPLIT_LIMIT = 2.0**20
"""Magnitudes are clamped here before rounding: above every FP8 maximum, far below overflow in the split."""

_GRIDS: dict[torch.dtype, tuple[float, float | None, float | None]] = {
    E4M3: (2.0**20 + 1, 2.0**-6, 1.5 * 2.0 ** (-9 + 23)),
    E5M2: (2.0**21 + 1, 2.0**-14, 1.5 * 2.0 ** (-16 + 23)),
    torch.bfloat16: (2.0**16 + 1, None, None),  # float32's exponent range: no fixed-spacing part that matters
    torch.float16: (2.0**13 + 1, 2.0**-14, 1.5 * 2.0 ** (-24 + 23)),
}
"""dtype: (Veltkamp multiplier ``2**(24 - significant bits) + 1``, smallest normal value, magic
number of the fixed spacing below it)."""


def round_to_grid(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Non-negative float32 ``a`` rounded to nearest-even on ``dtype``'s grid (no clamping)."""
    multiplier, smallest_normal, magic = _GRIDS[dtype]
    c = a * multiplier
    normal = c - (c - a)
    if smallest_normal is None or magic is None:
        return normal
    return torch.where(a < smallest_normal, (a + magic) - magic, normal)


def floor_pow2(a: torch.Tensor) -> torch.Tensor:
    """The largest power of two at most ``a`` (positive float32 below 2**100): ``a`` rounded to
    one significant bit by Veltkamp's splitting, halved where that rounded up."""
    c = a * (2.0**23 + 1)
    nearest = c - (c - a)
    return torch.where(nearest > a, nearest * 0.5, nearest)


def stochastic_round(x: torch.Tensor, noise: torch.Tensor, dropped: int) -> torch.Tensor:
    """``x`` with its float32 mantissa cut to ``23 - dropped`` bits, rounded up with the probability
    of the dropped part: rounding.stochastic_truncate_ with the same random bits, given as float32
    ``noise`` (integers below ``2**dropped``; inductor converts integer tensors element by element)."""
    a = x.abs()
    ulp = torch.clamp(floor_pow2(a) * 2.0 ** (dropped - 23), min=2.0 ** (dropped - 149))
    rounded = torch.floor(a / ulp + noise * 2.0**-dropped) * ulp
    return torch.copysign(rounded, x)


def pow2_scale(amax: torch.Tensor) -> torch.Tensor:
    """rounding.pow2_scale: ``2**k`` putting ``amax * 2**k`` in ``(2**14, 2**15]`` (k within +-126);
    1 where amax is 0 or not finite. Without frexp, which inductor does not vectorize."""
    big = amax > 2.0**64  # floor_pow2 takes values below 2**100: split the range
    power = torch.where(big, floor_pow2(amax * 2.0**-64) * 2.0**64, floor_pow2(amax))
    target = torch.where(power == amax, 2.0**HALF_TARGET_EXPONENT, 2.0 ** (HALF_TARGET_EXPONENT - 1))
    scale = torch.clamp(target / power, 2.0**-126, 2.0**126)
    usable = torch.isfinite(amax) & (amax > 0)
    return torch.where(usable, scale, torch.ones_like(amax))


def noise(value: torch.Tensor, keys: torch.Tensor, dropped: int) -> torch.Tensor:
    """rounding.random_low_bits for the elements of 1-D ``value``, under ``keys``, as float32
    integers: computed inside the kernel's loop, where eager code computes them as a tensor first."""
    return hashed_bits(value.numel(), keys, dropped).float()


def to_half(value: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(float16 storage, scale_inv) of float32 ``value`` with a power-of-two scale, stochastically rounded
    (O2's second moment, adam._store_rms)."""
    scale = pow2_scale(value.abs().amax())
    return stochastic_round(value * scale, noise, HALF_DROPPED_BITS).to(torch.float16), scale.reciprocal()


def to_half_keyed(value: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`to_half` with the random bits of ``keys`` (rounding.random_keys)."""
    return to_half(value, noise(value, keys, HALF_DROPPED_BITS))


def to_real_half_keyed(value: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(float16 storage, scale_inv 1) of float32 ``value``, unscaled and stochastically rounded with the
    random bits of ``keys``: weights.HalfWeight.encode, whose storage is the parameter's real values."""
    stored = stochastic_round(value, noise(value, keys, HALF_DROPPED_BITS), HALF_DROPPED_BITS).to(torch.float16)
    return stored, value.new_ones(())
