"""Fused CPU kernels for the FP8 hot path: one compiled loop where eager torch takes ten passes.

On the CPU the native backend's FP8 work around each GEMM (amax, scale, round to the FP8
grid, saturate, upcast) is element-wise. Done with eager torch operations it is about ten
passes over every operand (cpu_quantize.py); here it is written once as plain float
arithmetic and compiled by torch.compile's inductor into a single vectorized C++ loop
(plus one for the amax). Measured on one AVX512-BF16 core, 512x256: 70 us where the eager
path takes 492 (float32 input) or 108 (bfloat16).

Rounding to a grid of ``bits`` significant bits uses Veltkamp's splitting, which needs no
bit manipulation (inductor vectorizes bit casts poorly): with ``c = a * (2**(24 - bits) + 1)``,
``c - (c - a)`` is ``a`` rounded to nearest-even on that grid. Below the format's smallest
normal value the grid has a fixed spacing, and ``(a + m) - m`` with ``m = 1.5 * 2**(e + 23)``
rounds to multiples of ``2**e``. 16-bit inputs are first rounded the same way to their own
dtype, as torch's cast rounds ``x * scale`` to ``x``'s dtype before converting it to FP8:
the result is bit for bit ``upcast(cast_to_fp8(x, scale, dtype))`` (tested over every 16-bit
pattern of both formats). Magnitudes are clamped to 2**20 first (everything above the FP8
maximum saturates anyway), so the splitting cannot overflow; NaN stays NaN.

The kernels are compiled on first use (about 2 s each, less from inductor's disk cache), one
per (input dtype, FP8 dtype, output dtype), for 1-D views of contiguous tensors of any length. :func:`available` says whether this
machine can compile them (inductor needs a C++ compiler); where it cannot, the eager kernels
run, with the same results, and :func:`status` says why.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from accel.backends.native_fp8.cpu_gemm import compute_dtype
from accel.backends.native_fp8.formats import E4M3, E5M2, fp8_max

Kernel = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

_SPLIT_LIMIT = 2.0**20
"""Magnitudes are clamped here before rounding: above every FP8 maximum, far below overflow in the split."""

_GRIDS: dict[torch.dtype, tuple[float, float | None, float | None]] = {
    E4M3: (2.0**20 + 1, 2.0**-6, 1.5 * 2.0 ** (-9 + 23)),
    E5M2: (2.0**21 + 1, 2.0**-14, 1.5 * 2.0 ** (-16 + 23)),
    torch.bfloat16: (2.0**16 + 1, None, None),  # float32's exponent range: no fixed-spacing part that matters
    torch.float16: (2.0**13 + 1, 2.0**-14, 1.5 * 2.0 ** (-24 + 23)),
}
"""dtype: (Veltkamp multiplier ``2**(24 - significant bits) + 1``, smallest normal value, magic
number of the fixed spacing below it)."""

_SUPPORTED_INPUTS = (torch.float32, torch.bfloat16, torch.float16)


def round_to_grid(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Non-negative float32 ``a`` rounded to nearest-even on ``dtype``'s grid (no clamping)."""
    multiplier, smallest_normal, magic = _GRIDS[dtype]
    c = a * multiplier
    normal = c - (c - a)
    if smallest_normal is None or magic is None:
        return normal
    return torch.where(a < smallest_normal, (a + magic) - magic, normal)


def _operand_kernel(x: torch.Tensor, factor: torch.Tensor, fp8_dtype: torch.dtype, out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(upcast(cast_to_fp8(x, factor)) in out_dtype, max|x| in float32)``: what gets compiled."""
    product = x.float() * factor
    magnitude = product.abs().clamp(max=_SPLIT_LIMIT)
    if x.dtype != torch.float32:
        magnitude = round_to_grid(magnitude, x.dtype)
    rounded = round_to_grid(magnitude, fp8_dtype).clamp(max=fp8_max(fp8_dtype))
    return torch.copysign(rounded, product).to(out_dtype), x.abs().amax().float()


@functools.cache
def _compiled(x_dtype: torch.dtype, fp8_dtype: torch.dtype, out_dtype: torch.dtype) -> Kernel:
    """The compiled kernel for one dtype combination, for 1-D inputs of any length.

    Traced with a symbolic length and handed to inductor directly, not through torch.compile's
    frame evaluation: the result takes any 1-D tensor with no guards to check, so tensors made
    under inference mode, in backward or in a custom operator never cause a recompilation.
    """
    from torch._inductor.compile_fx import compile_fx  # imported on first use: inductor is slow to import
    from torch.fx.experimental.proxy_tensor import make_fx

    def kernel(x: torch.Tensor, factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _operand_kernel(x, factor, fp8_dtype, out_dtype)

    with torch.inference_mode(False), torch.no_grad(), torch.autocast("cpu", enabled=False), warnings.catch_warnings():
        # inductor notes when a loop loads float16 and stores bfloat16: expected here.
        warnings.filterwarnings("ignore", message="bf16 and fp16 are mixed")
        example = (torch.zeros(16, dtype=x_dtype), torch.ones((), dtype=torch.float32))
        graph = make_fx(kernel, tracing_mode="symbolic")(*example)
        symbolic = [node.meta["val"] for node in graph.graph.nodes if node.op == "placeholder"]
        return compile_fx(graph, symbolic)  # type: ignore[no-any-return]


def supports(x: torch.Tensor) -> bool:
    """Can :func:`quantize_operand` take ``x`` (contiguous, not empty, on the CPU, of a float dtype it knows)?"""
    return (
        x.device.type == "cpu" and x.dtype in _SUPPORTED_INPUTS and x.is_contiguous() and x.numel() > 0
        and available()
    )


def quantize_operand(
    x: torch.Tensor, factor: torch.Tensor, fp8_dtype: torch.dtype, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(upcast(cast_to_fp8(x, factor, fp8_dtype)) in out_dtype, max|x| as float32)`` in one
    compiled kernel; ``x`` contiguous, on the CPU (see :func:`supports`)."""
    operand, amax = _compiled(x.dtype, fp8_dtype, out_dtype)(x.reshape(-1), factor)
    return operand.view(x.shape), amax


@functools.cache
def _probe() -> str | None:
    """None when the kernels compile and give the eager kernels' numbers here, else why not."""
    try:
        x = torch.linspace(-600.0, 600.0, 97)
        factor = torch.tensor(0.75)
        out_dtype = compute_dtype()
        operand, amax = quantize_operand(x, factor, E4M3, out_dtype)
        expected = torch.mul(x, factor).clamp(-448.0, 448.0).to(E4M3).to(out_dtype)
    except Exception as error:  # noqa: BLE001 - any failure to compile means: use the eager kernels
        return f"torch.compile could not build them ({type(error).__name__}: {str(error).splitlines()[0][:200]})"
    if not torch.equal(operand, expected) or amax.item() != 600.0:
        return "torch.compile built them, but they disagreed with the eager kernels on a test tensor"
    return None


def available() -> bool:
    """Whether the fused kernels run here (compiled and checked once per process, on first use)."""
    return _probe() is None


def status() -> str:
    """One line for reports: which quantization kernels the CPU runs, and why."""
    reason = _probe()
    if reason is None:
        return "fused (torch.compile)"
    return f"eager: {reason}"
