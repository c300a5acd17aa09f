"""Fused CPU kernels for the FP8 hot path: one compiled loop where eager torch takes ten passes.

On the CPU the native backend's FP8 work around each GEMM is element-wise: for each operand
amax, scale, round to the FP8 grid, saturate, upcast (:func:`quantize_operand`); for each
weight gradient under O1/O2, dequantize the product, amax, scale and cast into the FP8
gradient store (:func:`gradient_to_fp8`). Done with eager torch operations that is up to ten
passes over the tensor (cpu_quantize.py, grads.py); here each is written once as plain float
arithmetic and compiled by torch.compile's inductor into vectorized C++ loops. Measured on
one AVX512-BF16 core, 512x256: an operand in 46-70 us where the eager kernels take 492
(float32 input) or 108 (bfloat16).

Rounding to a grid of ``bits`` significant bits uses Veltkamp's splitting, which needs no
bit manipulation (inductor vectorizes bit casts poorly): with ``c = a * (2**(24 - bits) + 1)``,
``c - (c - a)`` is ``a`` rounded to nearest-even on that grid. Below the format's smallest
normal value the grid has a fixed spacing, and ``(a + m) - m`` with ``m = 1.5 * 2**(e + 23)``
rounds to multiples of ``2**e``. 16-bit inputs are first rounded the same way to their own
dtype, as torch's cast rounds ``x * scale`` to ``x``'s dtype before converting it to FP8:
the result is bit for bit ``upcast(cast_to_fp8(x, scale, dtype))`` (tested over every 16-bit
pattern of both formats). Magnitudes are clamped to 2**20 first (everything above the FP8
maximum saturates anyway), so the splitting cannot overflow; NaN stays NaN.

The kernels are compiled on first use, one per dtype combination, for 1-D views of contiguous
tensors of any length: a training run needs about seven, measured 20 s in all on a shared 2-core
EPYC the first time and 3 s once inductor's disk cache holds them (it keeps them across runs).
The first compile that misses the cache says so on stderr, once per process (:func:`compile_kernel`). :func:`available`
says whether this machine can compile them (inductor needs a C++ compiler); where it cannot,
the eager kernels run, with the same results, and :func:`status` says why.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import cast

import torch

from accel.backends.native_fp8.cpu_gemm import compute_dtype
from accel.backends.native_fp8.formats import E4M3, fp8_max
from accel.backends.native_fp8.kernel_math import SPLIT_LIMIT, round_to_grid, to_real_half_keyed
from accel.backends.native_fp8.rounding import random_keys

_SUPPORTED_INPUTS = (torch.float32, torch.bfloat16, torch.float16)


def _operand_kernel(
    x: torch.Tensor, factor: torch.Tensor, fp8_dtype: torch.dtype, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(upcast(cast_to_fp8(x, factor)) in out_dtype, max|x| in float32)``: what gets compiled."""
    product = x.float() * factor
    magnitude = product.abs().clamp(max=SPLIT_LIMIT)
    if x.dtype != torch.float32:
        magnitude = round_to_grid(magnitude, x.dtype)
    rounded = round_to_grid(magnitude, fp8_dtype).clamp(max=fp8_max(fp8_dtype))
    return torch.copysign(rounded, product).to(out_dtype), x.abs().amax().float()


def _delayed_operand_kernel(
    x: torch.Tensor, scale: torch.Tensor, x_scale_inv: torch.Tensor, step_amax: torch.Tensor,
    fp8_dtype: torch.dtype, out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_operand_kernel` with a delayed-scaling scaler's bookkeeping: ``(operand, the step's running
    amax with x's real amax folded in, 1 / scale)``, for ``x`` whose real values are ``x * x_scale_inv``."""
    operand, amax = _operand_kernel(x, scale * x_scale_inv, fp8_dtype, out_dtype)
    return operand, torch.maximum(step_amax, amax * x_scale_inv), scale.reciprocal()


def _gradient_kernel(
    product: torch.Tensor, factor: torch.Tensor, numerator: torch.Tensor, step_amax: torch.Tensor,
    fp8_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(cast_to_fp8(g, scale), max(step_amax, max|g|), 1 / scale)`` for ``g = product * factor`` in
    float32 and the current scale ``numerator / max|g|`` (inf made the float32 maximum; the inverse
    NaN where max|g| is not finite, as grads.FP8Gradient records it): what gets compiled."""
    grad = product.float() * factor
    amax = grad.abs().amax()
    scale = torch.nan_to_num(numerator / amax, posinf=torch.finfo(torch.float32).max)
    limit = fp8_max(fp8_dtype)
    scale_inv = torch.where(torch.isfinite(amax), scale.reciprocal(), torch.nan)
    return (grad * scale).clamp(-limit, limit).to(fp8_dtype), torch.maximum(step_amax, amax), scale_inv


def compile_kernel(
    kernel: Callable[..., tuple[torch.Tensor, ...]], examples: Sequence[torch.Tensor]
) -> Callable[..., tuple[torch.Tensor, ...]]:
    """``kernel``, a function of CPU tensors made of element-wise operations and reductions,
    compiled by inductor for inputs like ``examples`` but of any size (every dimension of an
    example longer than 1 is symbolic; give 0-dim tensors for scalars).

    Traced with symbolic sizes and handed to inductor directly, not through torch.compile's
    frame evaluation: the result takes its tensors with no guards to check, so tensors made
    under inference mode, in backward or in a custom operator never cause a recompilation.
    """
    from torch._inductor.compile_fx import compile_fx  # imported on first use: inductor is slow to import
    from torch.fx.experimental.proxy_tensor import make_fx

    started, misses = time.perf_counter(), _cache_misses()
    with torch.inference_mode(False), torch.no_grad(), torch.autocast("cpu", enabled=False), warnings.catch_warnings():
        # inductor notes when a loop loads float16 and stores bfloat16: expected here.
        warnings.filterwarnings("ignore", message="bf16 and fp16 are mixed")
        # Traced through an unannotated function: a return annotation would become a global of the
        # graph's code that inductor's cache cannot key (a warning, and no cache across processes).
        graph = make_fx(lambda *inputs: kernel(*inputs), tracing_mode="symbolic")(*examples)
        symbolic = [node.meta["val"] for node in graph.graph.nodes if node.op == "placeholder"]
        # Outside AOT mode compile_fx gives the compiled callable (its annotation also lists AOT's outputs).
        compiled = cast(Callable[..., tuple[torch.Tensor, ...]], compile_fx(graph, symbolic))
    if _cache_misses() > misses:
        _say_first_compile(time.perf_counter() - started)
    return compiled


_said_first_compile = False


def _cache_misses() -> int:
    """How many graphs inductor has compiled in this process without finding them in its disk cache."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_miss"])


def _say_first_compile(seconds: float) -> None:
    """Tell the user, once per process and on each machine's first process only, why FP8 starts slowly.

    A newcomer's first FP8 run otherwise spends its first 20 s to minutes (on a busy machine)
    in silence, compiling; the line says what, how long, and that it happens once.
    """
    global _said_first_compile
    if _said_first_compile or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    _said_first_compile = True
    sys.stderr.write(
        f"accel: native FP8 is compiling its fused CPU kernels with inductor (first use here: this one took "
        f"{seconds:.1f} s; about seven in all, 20 s measured on a shared 2-core machine, longer when it is "
        f"busy). They are cached in {_cache_dir()}, so later runs load them in seconds.\n"
    )


def _cache_dir() -> str:
    """inductor's disk cache folder ($TORCHINDUCTOR_CACHE_DIR, else torch's default under the temp folder)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:  # moved in a later torch: name the setting instead
        return "$TORCHINDUCTOR_CACHE_DIR"
    return str(cache_dir())


@functools.cache
def _compiled(name: str, first_dtype: torch.dtype, *dtypes: torch.dtype) -> Callable[..., tuple[torch.Tensor, ...]]:
    """Kernel ``name`` ("operand", "delayed", "gradient" or "half") for a 1-D first input of ``first_dtype``
    and 0-dim float32 scalars after it (for "half", the two int32 random keys); ``dtypes`` complete its key."""
    if name == "half":
        return compile_kernel(to_real_half_keyed, [torch.zeros(16), torch.zeros(2, dtype=torch.int32)])
    kernels: dict[str, tuple[Callable[..., tuple[torch.Tensor, ...]], int]] = {
        "operand": (_operand_kernel, 1), "delayed": (_delayed_operand_kernel, 3), "gradient": (_gradient_kernel, 3)
    }
    body, scalars = kernels[name]

    def kernel(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return body(*inputs, *dtypes)

    return compile_kernel(kernel, [torch.zeros(16, dtype=first_dtype), *(torch.ones(()) for _ in range(scalars))])


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
    operand, amax = _compiled("operand", x.dtype, fp8_dtype, out_dtype)(x.reshape(-1), factor)
    return operand.view(x.shape), amax


def quantize_operand_delayed(
    x: torch.Tensor, scale: torch.Tensor, x_scale_inv: torch.Tensor, step_amax: torch.Tensor,
    fp8_dtype: torch.dtype, out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`quantize_operand` for a calibrated delayed-scaling scaler, its bookkeeping in the same call:
    ``(operand, max(step_amax, max|x| * x_scale_inv), 1 / scale)`` (see scaling.TensorScaler)."""
    operand, amax, scale_inv = _compiled("delayed", x.dtype, fp8_dtype, out_dtype)(
        x.reshape(-1), scale, x_scale_inv, step_amax
    )
    return operand.view(x.shape), amax, scale_inv


def to_half_stochastic(value: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(float16 storage, scale_inv 1)`` of float32 ``value`` (its real values), rounded
    stochastically with random bits from ``generator``: weights.HalfWeight.encode's result, bit
    for bit, from the same draws; ``value`` contiguous, on the CPU (see :func:`supports`)."""
    stored, scale_inv = _compiled("half", torch.float32)(value.reshape(-1), random_keys(generator))
    return stored.view(value.shape), scale_inv


def gradient_to_fp8(
    product: torch.Tensor, factor: torch.Tensor, numerator: torch.Tensor, step_amax: torch.Tensor,
    fp8_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight gradient ``product * factor`` (float32 arithmetic) cast to ``fp8_dtype`` with
    its own scale ``numerator / amax``: ``(fp8 tensor, max(step_amax, amax), scale_inv)``, as
    grads.FP8Gradient computes and records them; ``product`` contiguous, on the CPU (see :func:`supports`)."""
    q, amax, scale_inv = _compiled("gradient", product.dtype, fp8_dtype)(product.reshape(-1), factor, numerator, step_amax)
    return q.view(product.shape), amax, scale_inv


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
