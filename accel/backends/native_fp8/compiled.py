"""The FP8 layer as two custom operators, so that ``torch.compile(fullgraph=True)`` runs through it.

A Float8Linear's work changes Python-side state at every call: its scalers fold each tensor's
amax into the step's running amax, and under O1/O2 its backward hands the weight gradient to
the layer's FP8 gradient store. Dynamo cannot trace such side effects inside an autograd
backward, and the cast itself probes the device once (formats.cast_saturates). Under
``torch.compile`` the layer therefore calls :func:`fp8_linear`: its forward and its backward are
each one custom operator (``accel::fp8_linear_forward`` / ``accel::fp8_linear_backward``), opaque
to the compiler, that run the same code as the eager layer (functions.linear_forward and
linear_backward), so compiled and eager give the same numbers. The graph around them is
compiled as usual; nothing inside them is fused.

The operators find their layer by a handle (an int the graph holds as a constant). The backward
operator writes into the layer's ``compile_token`` (a 0-dim tensor handed through forward), so the
compiler neither drops it (under O1/O2 its gradients leave through the FP8 store, not through its
outputs) nor reorders it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch

from accel.backends.native_fp8.functions import linear_backward, linear_forward
from accel.backends.native_fp8.gemm import operand_dtype

if TYPE_CHECKING:
    from accel.backends.native_fp8.linear import Float8Linear

_LAYERS: weakref.WeakValueDictionary[int, Float8Linear] = weakref.WeakValueDictionary()


def register(layer: Float8Linear) -> int:
    """Make ``layer`` reachable by the operators; returns its handle."""
    handle = id(layer)
    _LAYERS[handle] = layer
    return handle


def _layer(handle: int) -> Float8Linear:
    layer = _LAYERS.get(handle)
    if layer is None:
        raise RuntimeError(f"no Float8Linear is registered under handle {handle}: the compiled graph outlived it")
    return layer


@torch.library.custom_op("accel::fp8_linear_forward", mutates_args=())
def _forward(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, token: torch.Tensor, handle: int,
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    layer = _layer(handle)
    scalers = (layer.input_scaler, layer.weight_scaler, layer.grad_scaler)
    y, (x_op, w_op, x_inv, w_inv) = linear_forward(
        x, weight, bias, scalers, out_dtype, layer.compact, layer.fp8_weight, layer.transposed_weight
    )
    # Outputs must be fresh tensors: a kept FP8 weight (fp8_params) and its scale are held by the layer.
    return y, x_op, w_op if layer.fp8_weight is None else w_op.clone(), x_inv.clone(), w_inv.clone()


@_forward.register_fake
def _forward_fake(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, token: torch.Tensor, handle: int,
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    layer = _layer(handle)
    forward_dtype = layer.input_scaler.dtype
    rows = x.shape[0]
    scalar = x.new_empty((), dtype=torch.float32)
    return (
        x.new_empty((rows, layer.out_features), dtype=out_dtype),
        x.new_empty((rows, layer.in_features), dtype=operand_dtype(forward_dtype, x.device)),
        x.new_empty((layer.out_features, layer.in_features), dtype=operand_dtype(forward_dtype, x.device)),
        scalar,
        scalar.clone(),
    )


@torch.library.custom_op("accel::fp8_linear_backward", mutates_args=("token",))
def _backward(
    grad_y: torch.Tensor, x_op: torch.Tensor, w_op: torch.Tensor, x_inv: torch.Tensor, w_inv: torch.Tensor,
    token: torch.Tensor, handle: int, x_dtype: torch.dtype, weight_dtype: torch.dtype,
    bias_dtype: torch.dtype | None, needs: list[bool],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    layer = _layer(handle)
    grads = linear_backward(
        grad_y, (x_op, w_op, x_inv, w_inv), layer.grad_scaler, layer.compact, (x_dtype, weight_dtype, bias_dtype),
        layer.transposed_weight, (needs[0], needs[1], needs[2]),
    )
    token.add_(1)
    grad_x, grad_w, grad_b = (grad_y.new_empty(0) if g is None else g for g in grads)
    return grad_x, grad_w, grad_b


@_backward.register_fake
def _backward_fake(
    grad_y: torch.Tensor, x_op: torch.Tensor, w_op: torch.Tensor, x_inv: torch.Tensor, w_inv: torch.Tensor,
    token: torch.Tensor, handle: int, x_dtype: torch.dtype, weight_dtype: torch.dtype,
    bias_dtype: torch.dtype | None, needs: list[bool],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    layer = _layer(handle)
    compact = layer.compact is not None
    weight_shape = tuple(layer.weight.shape)
    grad_x = grad_y.new_empty((grad_y.shape[0], layer.in_features), dtype=x_dtype) if needs[0] else grad_y.new_empty(0)
    grad_w = grad_y.new_empty(weight_shape, dtype=weight_dtype) if needs[1] and not compact else grad_y.new_empty(0)
    with_b = needs[2] and bias_dtype is not None and not (layer.compact is not None and layer.compact.bias is not None)
    grad_b = grad_y.new_empty((layer.out_features,), dtype=bias_dtype) if with_b else grad_y.new_empty(0)
    return grad_x, grad_w, grad_b


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    x, weight, bias, token, handle, _ = inputs
    ctx.save_for_backward(*output[1:], token)
    ctx.handle = handle
    ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)


def _autograd_backward(ctx: Any, grad_y: torch.Tensor, *_: Any) -> tuple[torch.Tensor | None, ...]:
    needs = [bool(n) for n in ctx.needs_input_grad[:3]]
    grads = _backward(grad_y, *ctx.saved_tensors, ctx.handle, *ctx.dtypes, needs)
    grad_x, grad_w, grad_b = (g if need and g.numel() else None for g, need in zip(grads, needs))
    return grad_x, grad_w, grad_b, None, None, None


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def fp8_linear(x: torch.Tensor, layer: Float8Linear, out_dtype: torch.dtype) -> torch.Tensor:
    """``layer``'s FP8 product of 2-D ``x`` in ``out_dtype``, through the custom operators."""
    y: torch.Tensor = _forward(x, layer.weight, layer.bias, layer.compile_token, layer.compile_handle, out_dtype)[0]
    return y
