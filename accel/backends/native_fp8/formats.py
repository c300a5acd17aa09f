"""The two FP8 formats and the cast from high precision into them.

E4M3 (``torch.float8_e4m3fn``, largest finite value 448) has more mantissa and
suits forward tensors; E5M2 (``torch.float8_e5m2``, largest finite value 57344)
has more range and suits gradients. ``HYBRID`` uses E4M3 forward and E5M2 for
gradients; ``E4M3`` uses E4M3 for both (TransformerEngine's two training
formats; pure E5M2 training is rejected, as TransformerEngine rejects it).
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Sequence

import torch

E4M3: torch.dtype = torch.float8_e4m3fn
E5M2: torch.dtype = torch.float8_e5m2

FP8_MAX: dict[torch.dtype, float] = {E4M3: 448.0, E5M2: 57344.0}

FP8_FORMATS: tuple[str, ...] = ("HYBRID", "E4M3")

# Everything but the sign bit: zero and negative zero are the fp8 bytes 0x00 and 0x80
# in both formats.
_MAGNITUDE_BITS = 0x7F


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an FP8 dtype (448 for E4M3, 57344 for E5M2)."""
    try:
        return FP8_MAX[dtype]
    except KeyError:
        raise ValueError(
            f"dtype={dtype} is not an FP8 training dtype; accepted: {E4M3}, {E5M2}"
        ) from None


def format_dtypes(fp8_format: str) -> tuple[torch.dtype, torch.dtype]:
    """The (forward, gradient) dtypes of an FP8 format name."""
    if fp8_format == "HYBRID":
        return E4M3, E5M2
    if fp8_format == "E4M3":
        return E4M3, E4M3
    if fp8_format == "E5M2":
        raise ValueError(
            "fp8_format='E5M2' is not supported: pure E5M2 training lacks the mantissa "
            "for activations and weights; accepted: ['HYBRID', 'E4M3'] "
            "('HYBRID' uses E5M2 for gradients)"
        )
    raise choice_error("fp8_format", fp8_format, FP8_FORMATS)


def choice_error(argument: str, value: object, accepted: Sequence[str]) -> ValueError:
    """A ValueError naming the argument, the bad value, the accepted values and the closest one."""
    by_lower = {choice.lower(): choice for choice in accepted}
    close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1, cutoff=0.5)
    hint = f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
    return ValueError(f"{argument}={value!r} is not supported; accepted: {list(accepted)}{hint}")


def cast_to_fp8(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Quantize ``x``: ``(x * scale).clamp(-max, max).to(dtype)``, row-major whatever x's strides.

    ``scale`` is the *quantization* scale (TransformerEngine's ``scale``; the GEMM
    takes its reciprocal). Out-of-range values saturate, which the plain cast does
    not do everywhere (on CPU, E5M2 overflows to inf; on CUDA, E4M3 to NaN). NaN
    stays NaN. Where the cast itself saturates (probed once per dtype and device
    type; E4M3 on CPU) the product is written straight into the FP8 result: one
    pass. Elsewhere it goes through a contiguous temporary clamped in place.
    """
    if cast_saturates(dtype, x.device.type):
        return torch.mul(x, scale, out=torch.empty(x.shape, dtype=dtype, device=x.device))
    limit = fp8_max(dtype)
    scaled = torch.empty_like(x, memory_format=torch.contiguous_format)
    torch.mul(x, scale, out=scaled)
    scaled.clamp_(-limit, limit)
    return scaled.to(dtype)


@functools.cache
def cast_saturates(dtype: torch.dtype, device_type: str) -> bool:
    """Does casting to ``dtype`` on ``device_type`` turn out-of-range values and infinities
    into the largest finite magnitude (keeping NaN)? Probed once with a tiny tensor."""
    if device_type == "meta":
        return False
    probe = torch.tensor([1e30, -1e30, math.inf, -math.inf, math.nan], device=device_type)
    limit = fp8_max(dtype)
    cast = torch.mul(probe, 1.0, out=torch.empty(5, dtype=dtype, device=device_type)).float().cpu()
    return cast[:4].tolist() == [limit, -limit, limit, -limit] and math.isnan(cast[4].item())


def fp8_is_zero(q: torch.Tensor) -> torch.Tensor:
    """Boolean mask of the zeros (either sign) of an FP8 tensor, without upcasting it."""
    return (q.view(torch.uint8) & _MAGNITUDE_BITS) == 0
