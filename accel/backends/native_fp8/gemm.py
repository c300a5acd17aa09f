"""The FP8 layer's matrix products: ``torch._scaled_mm`` off the CPU, exact upcasts on it.

A GEMM operand is an FP8 tensor off the CPU (what ``_scaled_mm`` takes) and its exact upcast
on the CPU (cpu_gemm.py): :func:`operand` turns a quantized tensor into one, once, so that
the layer can save it for backward and upcast nothing twice. Layouts follow CUDA's rules
(first operand row-major, second column-major, dimensions multiples of 16), so one code path
serves both devices.
"""

from __future__ import annotations

import torch

from accel.backends.native_fp8.cpu_gemm import compute_dtype, cpu_mm, upcast, without_autocast

CUDA_GEMM_ALIGNMENT = 16
"""CUDA's _scaled_mm needs every dimension but mat1's rows to be a multiple of 16."""


def operand_dtype(fp8_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype :func:`operand` gives for an FP8 tensor of ``fp8_dtype`` on ``device``."""
    return compute_dtype() if device.type == "cpu" else fp8_dtype


def operand(q: torch.Tensor) -> torch.Tensor:
    """A quantized FP8 tensor as GEMM operand: itself off the CPU, its exact upcast on it."""
    return upcast(q) if q.device.type == "cpu" else q


def gemm(
    a: torch.Tensor, b: torch.Tensor, scale_a_inv: torch.Tensor, scale_b_inv: torch.Tensor, out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(a * scale_a_inv) @ (b * scale_b_inv) (+ bias)`` of two :func:`operand`s, in ``out_dtype``."""
    if a.device.type == "cpu":
        return cpu_mm(a, b, scale_a_inv, scale_b_inv, out_dtype, bias)
    y = torch._scaled_mm(a, b, scale_a=scale_a_inv, scale_b=scale_b_inv, out_dtype=out_dtype)
    return y if bias is None else y.add_(bias)


def scaled_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a_inv: torch.Tensor, scale_b_inv: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """``(a * scale_a_inv) @ (b * scale_b_inv)`` on FP8 tensors ``a`` and ``b``.

    Off the CPU, ``torch._scaled_mm`` (FP8 tensor cores). On the CPU, where torch has no
    FP8 kernel (its ``_scaled_mm`` upcasts slowly, or on CPUs with AMX-INT8 runs a oneDNN
    reference kernel ~150x slower still), the same product from exact upcasts.
    """
    return gemm(operand(a), operand(b), scale_a_inv, scale_b_inv, out_dtype)


def torch_scaled_mm_on_cpu(
    a: torch.Tensor, b: torch.Tensor, scale_a_inv: torch.Tensor, scale_b_inv: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """torch's own ``_scaled_mm`` on the CPU with oneDNN switched off around it: the reference
    the CPU path is tested and benchmarked against. The switch is process-global during the call."""
    previous = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        return torch._scaled_mm(a, b, scale_a=scale_a_inv, scale_b=scale_b_inv, out_dtype=out_dtype)
    finally:
        torch._C._set_mkldnn_enabled(previous)


def as_mat2(t: torch.Tensor) -> torch.Tensor:
    """``t`` laid out as a second operand: column-major off the CPU; on the CPU as it is
    (the product takes any layout there, so a column-major copy would be wasted)."""
    if t.device.type == "cpu" or t.stride(0) == 1:
        return t
    return t.t().contiguous().t()


def pad_rows(t: torch.Tensor, multiple: int) -> torch.Tensor:
    """An FP8 matrix with zero rows appended up to a multiple of ``multiple`` rows.

    FP8 zero is the zero byte, so the padding is made on the uint8 view.
    """
    extra = -t.shape[0] % multiple
    if extra == 0:
        return t
    raw = t.view(torch.uint8)
    return torch.cat((raw, raw.new_zeros(extra, t.shape[1]))).view(t.dtype)


def weight_gradient_product(
    g: torch.Tensor, x: torch.Tensor, g_inv: torch.Tensor, x_inv: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """dW = g.T @ x for the FP8 gradient store (grads.FP8Gradient.add_product), as ``(product, factor)``:
    on the CPU the operands' product and the factor that dequantizes it, applied by the store in
    the pass that casts it; elsewhere dW in float32 and None."""
    if g.device.type == "cpu":
        with without_autocast():
            return torch.mm(g.t(), x), g_inv * x_inv
    return weight_gradient(g, x, g_inv, x_inv, torch.float32), None


def weight_gradient(
    g: torch.Tensor, x: torch.Tensor, g_inv: torch.Tensor, x_inv: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """dW = g.T @ x of two operands. Its contraction runs over the tokens, whose count is
    free; off the CPU it is padded with zero rows to CUDA's multiple of 16 (zeros add nothing)."""
    if g.device.type == "cpu":
        return gemm(g.t(), x, g_inv, x_inv, out_dtype)
    g = pad_rows(g, CUDA_GEMM_ALIGNMENT)
    x = pad_rows(x, CUDA_GEMM_ALIGNMENT)
    return gemm(g.t().contiguous(), as_mat2(x), g_inv, x_inv, out_dtype)
