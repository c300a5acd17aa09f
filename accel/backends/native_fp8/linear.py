"""Float8Linear: an nn.Linear whose three GEMMs run in FP8 through ``torch._scaled_mm``.

Forward:  y  = x_q @ w_q.T                  (E4M3 x E4M3)
Backward: dX = g_q @ w_q                    (g in E5M2 under HYBRID, E4M3 under E4M3)
          dW = g_q.T @ x_q                  (out in the weight's dtype)
          db = sum(g)                       (high precision)

y comes out in the autocast dtype under torch.autocast (as nn.Linear's does),
else in x's dtype; dX in x's dtype. The FP8 copies of x and W made in forward
are saved for backward, so nothing is cast twice and the saved activation takes
a quarter of the memory of an fp32 one. Operands are laid out as CUDA requires
(row-major first operand, column-major second, dimensions multiples of 16), so
the same code runs on CPU and GPU. The layer keeps the original ``weight`` and ``bias`` Parameter objects and
their names, so optimizers built before conversion and state dicts of the
unconverted model keep working; the scaling state lives outside the state dict
(see convert.fp8_state_dict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from accel.backends.native_fp8.formats import format_dtypes
from accel.backends.native_fp8.scaling import TensorScaler, check_scaling_args

SCALER_ROLES: tuple[str, ...] = ("input", "weight", "grad_output")

# CUDA's _scaled_mm needs every dimension but mat1's rows to be a multiple of 16.
CUDA_GEMM_ALIGNMENT = 16

# Hook state taken over from the replaced module: the dictionaries are shared, so
# hooks registered on it keep running (and their handles keep removing them).
_HOOK_ATTRIBUTES: tuple[str, ...] = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
    "_is_full_backward_hook",
)


@dataclass(frozen=True)
class Float8Config:
    """How a Float8Linear scales and casts; validated on construction.

    Field meanings follow TransformerEngine's DelayedScaling recipe (DESIGN.md,
    FP8RecipeKwargs). ``count_stats`` turns on the per-step counts of saturated
    and flushed-to-zero values, which cost extra passes over every tensor.
    """

    fp8_format: str = "HYBRID"
    margin: int = 0
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    scaling: str = "delayed"
    count_stats: bool = False

    def __post_init__(self) -> None:
        format_dtypes(self.fp8_format)
        check_scaling_args(
            margin=self.margin,
            amax_history_len=self.amax_history_len,
            amax_compute_algo=self.amax_compute_algo,
            scaling=self.scaling,
        )
        if not isinstance(self.count_stats, bool):
            raise ValueError(
                f"count_stats={self.count_stats!r} is not supported; accepted: True or False"
            )

    def make_scaler(self, dtype: torch.dtype, device: torch.device | None) -> TensorScaler:
        """A fresh TensorScaler for one tensor role cast to ``dtype``."""
        return TensorScaler(
            dtype,
            margin=self.margin,
            amax_history_len=self.amax_history_len,
            amax_compute_algo=self.amax_compute_algo,
            scaling=self.scaling,
            count_stats=self.count_stats,
            device=device,
        )


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a_inv: torch.Tensor,
    scale_b_inv: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """``(a * scale_a_inv) @ (b * scale_b_inv)`` on FP8 operands, via ``torch._scaled_mm``.

    On CPU, oneDNN is switched off around the call: on CPUs with AMX-INT8, torch
    2.13 routes same-dtype FP8 GEMMs to oneDNN, which runs them on its reference
    kernel (``ref:any``), measured ~150x slower than torch's own kernel (6.3 s
    against 42 ms for 512^3). The switch is process-global for the duration of
    the call.
    """
    if a.device.type != "cpu":
        return torch._scaled_mm(a, b, scale_a=scale_a_inv, scale_b=scale_b_inv, out_dtype=out_dtype)
    previous = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        return torch._scaled_mm(a, b, scale_a=scale_a_inv, scale_b=scale_b_inv, out_dtype=out_dtype)
    finally:
        torch._C._set_mkldnn_enabled(previous)


def as_mat2(t: torch.Tensor) -> torch.Tensor:
    """``t`` laid out as ``_scaled_mm``'s second operand.

    CUDA requires it column-major. The CPU kernel copies any second operand to
    row-major before multiplying, so there a column-major copy would be made and
    thrown away; a row-major ``t`` is passed on CPU as it is.
    """
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


def weight_gradient(
    g_q: torch.Tensor, x_q: torch.Tensor, g_inv: torch.Tensor, x_inv: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """dW = g.T @ x. Its contraction runs over the tokens, whose count is free; off CPU
    it is padded with zero rows to CUDA's multiple of 16 (zeros add nothing to dW)."""
    if g_q.device.type != "cpu":
        g_q = pad_rows(g_q, CUDA_GEMM_ALIGNMENT)
        x_q = pad_rows(x_q, CUDA_GEMM_ALIGNMENT)
    return scaled_mm(g_q.t().contiguous(), as_mat2(x_q), g_inv, x_inv, out_dtype)


class _Float8LinearFunction(torch.autograd.Function):
    """The FP8 GEMMs of a 2-D linear layer, with their scalers."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        scalers: tuple[TensorScaler, TensorScaler, TensorScaler],
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        input_scaler, weight_scaler, grad_scaler = scalers
        x_q, x_inv = input_scaler.quantize(x)
        w_q, w_inv = weight_scaler.quantize(weight)
        y = scaled_mm(x_q, w_q.t(), x_inv, w_inv, out_dtype)
        if bias is not None:
            y.add_(bias)
        ctx.save_for_backward(x_q, w_q, x_inv, w_inv)
        ctx.grad_scaler = grad_scaler
        ctx.x_dtype = x.dtype
        ctx.weight_dtype = weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x_q, w_q, x_inv, w_inv = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = grad_w = grad_b = None
        if need_x or need_w:
            g_q, g_inv = ctx.grad_scaler.quantize(grad_y)
            if need_x:
                grad_x = scaled_mm(g_q, as_mat2(w_q), g_inv, w_inv, ctx.x_dtype)
            if need_w:
                grad_w = weight_gradient(g_q, x_q, g_inv, x_inv, ctx.weight_dtype)
        if need_b:
            grad_b = grad_y.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
        return grad_x, grad_w, grad_b, None, None


class Float8Linear(nn.Linear):
    """nn.Linear computing in FP8 (see the module docstring); ``enabled=False`` is plain F.linear.

    Build it with :meth:`from_linear` to take over an existing layer's Parameters.
    Per tensor role it holds a TensorScaler: ``input_scaler``, ``weight_scaler``
    and ``grad_scaler``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        config: Float8Config | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device, dtype)
        self._init_fp8(config or Float8Config())

    @classmethod
    def from_linear(cls, linear: nn.Linear, config: Float8Config | None = None) -> Float8Linear:
        """A Float8Linear that uses ``linear``'s own ``weight`` and ``bias`` Parameter objects.

        ``linear``'s hooks stay in effect, and :meth:`to_linear` gives ``linear`` back.
        """
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features = linear.in_features
        layer.out_features = linear.out_features
        layer.weight = linear.weight
        layer.register_parameter("bias", linear.bias)
        layer.train(linear.training)
        for name in _HOOK_ATTRIBUTES:
            if name in linear.__dict__:
                layer.__dict__[name] = linear.__dict__[name]
        # Outside nn.Module's registry: not a submodule, not in the state dict.
        layer.__dict__["_replaced_linear"] = linear
        layer._init_fp8(config or Float8Config())
        return layer

    def _init_fp8(self, config: Float8Config) -> None:
        self.config = config
        self.enabled = True
        forward_dtype, grad_dtype = format_dtypes(config.fp8_format)
        device = self.weight.device
        self.input_scaler = config.make_scaler(forward_dtype, device)
        self.weight_scaler = config.make_scaler(forward_dtype, device)
        self.grad_scaler = config.make_scaler(grad_dtype, device)

    def to_linear(self) -> nn.Linear:
        """The high-precision layer, holding this layer's current Parameters.

        For a layer made by :meth:`from_linear` that is the original module;
        otherwise a new nn.Linear.
        """
        linear = self.__dict__.get("_replaced_linear")
        if linear is None:
            linear = nn.Linear.__new__(nn.Linear)
            nn.Module.__init__(linear)
            linear.in_features = self.in_features
            linear.out_features = self.out_features
        linear.weight = self.weight
        linear.register_parameter("bias", self.bias)
        linear.train(self.training)
        return linear

    def scalers(self) -> dict[str, TensorScaler]:
        """The three scalers, by role: ``input``, ``weight``, ``grad_output``."""
        return dict(zip(SCALER_ROLES, (self.input_scaler, self.weight_scaler, self.grad_scaler)))

    def found_nonfinite(self) -> torch.Tensor:
        """0-dim bool tensor: did this step's input, weight or output gradient hold NaN/inf?"""
        amaxes = torch.stack([s.step_amax for s in self.scalers().values()])
        return ~torch.isfinite(amaxes).all()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return F.linear(x, self.weight, self.bias)
        device_type = x.device.type
        if torch.is_autocast_enabled(device_type):
            out_dtype = torch.get_autocast_dtype(device_type)
        else:
            out_dtype = x.dtype
        scalers = (self.input_scaler, self.weight_scaler, self.grad_scaler)
        y: torch.Tensor = _Float8LinearFunction.apply(  # type: ignore[no-untyped-call]
            x.reshape(-1, self.in_features), self.weight, self.bias, scalers, out_dtype
        )
        return y.reshape(*x.shape[:-1], self.out_features)

    def _apply(self, fn: Any, recurse: bool = True) -> Float8Linear:
        # Scalers follow the weight's device but keep their own dtypes (fp32/bool/int64).
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        for scaler in (self.input_scaler, self.weight_scaler, self.grad_scaler):
            scaler.to(self.weight.device)
        return self

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, config={self.config}, enabled={self.enabled}"
