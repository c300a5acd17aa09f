"""The autograd functions of Float8Linear: its FP8 GEMMs, and high precision on O1/O2 storage.

Forward:  y  = x_q @ w_q.T                  (E4M3 x E4M3)
Backward: dX = g_q @ w_q                    (g in E5M2 under HYBRID, E4M3 under E4M3)
          dW = g_q.T @ x_q                  (float32 into the FP8 gradient under O1/O2)
          db = sum(g)                       (high precision)

The GEMM operands made in forward (TensorScaler.quantize_operand: FP8 off the CPU, the FP8
values in bf16/fp32 on it) are saved for backward, so nothing is quantized or upcast twice.

``transposed``: the weight Parameter is stored (in, out), as transformers' Conv1D stores it.
The cast to FP8 writes it row-major as (out, in), so the GEMMs are those of a Linear, and
dW is computed as x_q.T @ g_q, in the Parameter's own layout.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from accel.backends.native_fp8.compact import CompactLayer
from accel.backends.native_fp8.fp8_weight import FP8Weight
from accel.backends.native_fp8.fsdp_weight import GatheredFP8Weight
from accel.backends.native_fp8.gemm import as_mat2, gemm, operand, weight_gradient, weight_gradient_product
from accel.backends.native_fp8.scaling import TensorScaler

Scalers = tuple[TensorScaler, TensorScaler, TensorScaler]


Saved = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""What forward keeps for backward: the GEMM operands of x and w and their dequantization scales."""


def linear_forward(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scalers: Scalers, out_dtype: torch.dtype,
    compact: CompactLayer | None, fp8_weight: FP8Weight | None, transposed: bool,
) -> tuple[torch.Tensor, Saved]:
    """y = x_q @ w_q.T (+ bias) in ``out_dtype``, and what backward needs (see Float8LinearFunction)."""
    input_scaler, weight_scaler, _ = scalers
    x_op, x_inv = input_scaler.quantize_operand(x)
    weight_scale_inv = None if compact is None else compact.weight.storage.data_scale_inv
    if isinstance(weight, GatheredFP8Weight):  # FSDP2 all-gathered it in FP8 (fp8_params, fsdp_weight.py)
        w_op, w_inv = operand(weight.fp8_rows(transposed)), weight._scale_inv
    elif fp8_weight is None:
        w = weight.t() if transposed else weight  # (out, in); the cast writes it row-major
        w_op, w_inv = weight_scaler.quantize_operand(w, weight_scale_inv)
    else:  # kept in FP8 between steps
        w_q, w_inv = fp8_weight.get(weight.t() if transposed else weight, weight_scaler, weight_scale_inv)
        w_op = operand(w_q)
    if bias is not None and compact is not None and compact.bias is not None:
        bias = compact.bias.storage.value(out_dtype)
    y = gemm(x_op, w_op.t(), x_inv, w_inv, out_dtype, bias)
    return y, (x_op, w_op, x_inv, w_inv)


def linear_backward(
    grad_y: torch.Tensor, saved: Saved, grad_scaler: TensorScaler, compact: CompactLayer | None,
    dtypes: tuple[torch.dtype, torch.dtype, torch.dtype | None], transposed: bool, needs: tuple[bool, bool, bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(dX, dW, db) of :func:`linear_forward`, for the inputs in ``needs``; ``dtypes`` are x's, the
    weight's and the bias's. Under O1/O2 dW and db go to ``compact``'s FP8 gradients (None returned)."""
    x_op, w_op, x_inv, w_inv = saved
    need_x, need_w, need_b = needs
    x_dtype, weight_dtype, bias_dtype = dtypes
    grad_x = grad_w = None
    if need_x or need_w:
        g_op, g_inv = grad_scaler.quantize_operand(grad_y)
        if need_x:
            grad_x = gemm(g_op, as_mat2(w_op), g_inv, w_inv, x_dtype)
        # dW in the Parameter's layout: g.T @ x (out, in), or x.T @ g (in, out) for a transposed weight
        pair = (x_op, g_op, x_inv, g_inv) if transposed else (g_op, x_op, g_inv, x_inv)
        if need_w and compact is not None:
            compact.weight.grad.add_product(*weight_gradient_product(*pair))
        elif need_w:
            grad_w = weight_gradient(*pair, weight_dtype)
    grad_b = _bias_gradient(grad_y, compact, bias_dtype) if need_b and bias_dtype is not None else None
    return grad_x, grad_w, grad_b


class Float8LinearFunction(torch.autograd.Function):
    """The FP8 GEMMs of a 2-D linear layer, with its (input, weight, grad_output) scalers.

    With ``compact`` (O1/O2 storage) the weight and bias arrive as their 16-bit storage and
    their gradients go to ``compact``'s FP8 gradients instead of to autograd.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scalers: Scalers,
        out_dtype: torch.dtype, compact: CompactLayer | None, fp8_weight: FP8Weight | None = None,
        transposed: bool = False,
    ) -> torch.Tensor:
        y, saved = linear_forward(x, weight, bias, scalers, out_dtype, compact, fp8_weight, transposed)
        ctx.save_for_backward(*saved)
        ctx.grad_scaler = scalers[2]
        ctx.compact = compact
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.transposed = transposed
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grads = linear_backward(
            grad_y, ctx.saved_tensors, ctx.grad_scaler, ctx.compact, ctx.dtypes, ctx.transposed,
            tuple(ctx.needs_input_grad[:3]),
        )
        return (*grads, None, None, None, None, None)


def _bias_gradient(grad_y: torch.Tensor, compact: CompactLayer | None, dtype: torch.dtype) -> torch.Tensor | None:
    """sum(grad_y) in float32: into the FP8 gradient under O1/O2 (returning None), else returned."""
    grad_b = grad_y.sum(0, dtype=torch.float32)
    if compact is not None and compact.bias is not None:
        compact.bias.grad.add(grad_b)
        return None
    return grad_b.to(dtype)


class CompactLinearFunction(torch.autograd.Function):
    """``F.linear`` in high precision on a layer with O1/O2 storage (FP8 switched off).

    The weight and bias are read from their 16-bit storage, and their gradients go to the
    layer's FP8 gradients, as in the FP8 path: training in eval mode keeps working.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, compact: CompactLayer,
        transposed: bool = False,
    ) -> torch.Tensor:
        w = compact.weight.storage.value(x.dtype)
        w = w.t() if transposed else w  # (out, in)
        b = None if compact.bias is None else compact.bias.storage.value(x.dtype)
        ctx.save_for_backward(x, w)
        ctx.compact = compact
        ctx.transposed = transposed
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, w = ctx.saved_tensors
        compact: CompactLayer = ctx.compact
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = (grad_y @ w.to(grad_y.dtype)).to(x.dtype) if need_x else None
        g2 = grad_y.reshape(-1, grad_y.shape[-1]).float()
        if need_w:
            x2 = x.reshape(-1, x.shape[-1]).float()
            compact.weight.grad.add(x2.t() @ g2 if ctx.transposed else g2.t() @ x2)
        if need_b and compact.bias is not None:
            compact.bias.grad.add(g2.sum(0))
        return grad_x, None, None, None, None
