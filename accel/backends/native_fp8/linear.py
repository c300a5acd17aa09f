"""Float8Linear: an nn.Linear whose three GEMMs run in FP8 (``torch._scaled_mm`` off the CPU).

Forward, input gradient and weight gradient are FP8 products (functions.py) with per-tensor
scales from three TensorScalers (input, weight, output gradient); bias and accumulation stay
in high precision. y comes out in the autocast dtype under torch.autocast (as nn.Linear's
does), else in x's dtype; dX in x's dtype. On the CPU the products are computed from exact
upcasts of the FP8 operands (cpu_gemm.py), torch having no CPU FP8 kernel.

The layer keeps the original ``weight`` and ``bias`` Parameter objects and their names, so
optimizers built before conversion and state dicts of the unconverted model keep working;
the scaling state lives outside the state dict (see convert.fp8_state_dict). Under O1/O2
(:meth:`Float8Linear.make_compact`) the Parameters hold 16-bit storage and their gradients
are kept in FP8, while ``state_dict()`` still gives real values in the original dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from accel.backends.native_fp8 import compiled
from accel.backends.native_fp8.compact import CompactLayer
from accel.backends.native_fp8.formats import format_dtypes
from accel.backends.native_fp8.fp8_weight import FP8Weight
from accel.backends.native_fp8.fsdp_weight import plain_master
from accel.backends.native_fp8.functions import CompactLinearFunction, Float8LinearFunction
from accel.backends.native_fp8.gemm import as_mat2, pad_rows, scaled_mm, weight_gradient
from accel.backends.native_fp8.scaling import TensorScaler, check_scaling_args

SCALER_ROLES: tuple[str, ...] = ("input", "weight", "grad_output")

__all__ = ["SCALER_ROLES", "Float8Config", "Float8Linear", "as_mat2", "pad_rows", "scaled_mm", "weight_gradient"]

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


class Float8Linear(nn.Linear):
    """nn.Linear computing in FP8 (see the module docstring); ``enabled=False`` is plain F.linear.

    Build it with :meth:`from_linear` to take over an existing layer's Parameters.
    Per tensor role it holds a TensorScaler: ``input_scaler``, ``weight_scaler``
    and ``grad_scaler``.
    """

    transposed_weight: ClassVar[bool] = False
    """True where the weight Parameter is stored (in, out) (Float8Conv1D, transformers' Conv1D layout)."""

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
        return cls._take_over(linear, linear.in_features, linear.out_features, config)

    @classmethod
    def _take_over(cls, module: nn.Module, in_features: int, out_features: int, config: Float8Config | None) -> Any:
        """A layer of this class holding ``module``'s weight, bias, hooks and mode, and ``module`` to give back."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features = in_features
        layer.out_features = out_features
        # module is an nn.Linear or a transformers Conv1D: weight is a Parameter, bias one or None.
        layer.weight = cast(nn.Parameter, module.weight)
        layer.register_parameter("bias", cast("nn.Parameter | None", module.bias))
        layer.train(module.training)
        for name in _HOOK_ATTRIBUTES:
            if name in module.__dict__:
                layer.__dict__[name] = module.__dict__[name]
        # Outside nn.Module's registry: not a submodule, not in the state dict.
        layer.__dict__["_replaced_linear"] = module
        layer._init_fp8(config or Float8Config())
        return layer

    def _init_fp8(self, config: Float8Config) -> None:
        self.config = config
        self.enabled = True
        self.compile_handle = compiled.register(self)
        """How the custom operators of torch.compile find this layer (compiled.py)."""
        self.compile_token = torch.zeros((), dtype=torch.int64, device=self.weight.device)
        """Written by each compiled backward, so that the compiler keeps it in place (compiled.py)."""
        self.compact: CompactLayer | None = None
        """O1/O2 storage (16-bit weights, FP8 gradients), once :meth:`make_compact` was called."""
        self.fp8_weight: FP8Weight | None = None
        """The weight in FP8 between optimizer steps (fp8_params), once :meth:`keep_fp8_weight` was called."""
        forward_dtype, grad_dtype = format_dtypes(config.fp8_format)
        device = self.weight.device
        self.input_scaler = config.make_scaler(forward_dtype, device)
        self.weight_scaler = config.make_scaler(forward_dtype, device)
        self.grad_scaler = config.make_scaler(grad_dtype, device)

    def make_compact(self) -> CompactLayer:
        """Keep weight and bias in 16 bits with a scale and their gradients in FP8 (O1/O2).

        Idempotent. The Parameters stay the same objects; ``state_dict()`` keeps giving
        their real values in the original dtype, and loading one stores them anew.
        """
        if self.compact is None:
            self.compact = CompactLayer(self.weight, self.bias)
        return self.compact

    def keep_fp8_weight(self) -> FP8Weight:
        """Keep the weight in FP8 between changes of the master (fp8_params); idempotent.

        Whoever changes the weight Parameter (the optimizer step) must call
        ``self.fp8_weight.invalidate()``; loading a state dict and moving the layer do it here.
        """
        if self.fp8_weight is None:
            self.fp8_weight = FP8Weight()
        return self.fp8_weight

    def to_linear(self) -> nn.Linear:
        """The high-precision layer, holding this layer's current Parameters.

        For a layer made by :meth:`from_linear` that is the original module;
        otherwise a new nn.Linear. O1/O2 storage is given up: the Parameters get their
        real values back, in their original dtype.
        """
        if self.compact is not None:
            for _, part in self.compact.named():
                part.storage.release()
            self.compact = None
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
        transposed = self.transposed_weight
        if not self.enabled:
            if self.compact is not None:
                return CompactLinearFunction.apply(x, self.weight, self.bias, self.compact, transposed)
            return F.linear(x, self.weight.t() if transposed else self.weight, self.bias)
        device_type = x.device.type
        scalers = (self.input_scaler, self.weight_scaler, self.grad_scaler)
        x2 = x.reshape(-1, self.in_features)
        if torch.compiler.is_compiling():
            return self._compiled_forward(x, x2)
        if torch.is_autocast_enabled(device_type):
            # The FP8 GEMMs are done as they are (autocast must not cast their fp32 scales or
            # operands), and y comes out in the autocast dtype, as nn.Linear's would.
            with torch.autocast(device_type, enabled=False):
                y: torch.Tensor = Float8LinearFunction.apply(
                    x2, self.weight, self.bias, scalers, torch.get_autocast_dtype(device_type), self.compact,
                    self.fp8_weight, transposed,
                )
        else:
            y = Float8LinearFunction.apply(
                x2, self.weight, self.bias, scalers, x.dtype, self.compact, self.fp8_weight, transposed
            )
        return y.reshape(*x.shape[:-1], self.out_features)

    def _compiled_forward(self, x: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """forward under torch.compile: the FP8 product as custom operators the graph runs through."""
        device_type = x.device.type
        if torch.is_autocast_enabled(device_type):
            out_dtype = torch.get_autocast_dtype(device_type)
            with torch.autocast(device_type, enabled=False):
                y = compiled.fp8_linear(x2, self, out_dtype)
        else:
            y = compiled.fp8_linear(x2, self, x.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A copy (copy.deepcopy, pickle) is a layer of its own for the compiled operators.
        super().__setstate__(state)
        if "compile_handle" in state:
            self.compile_handle = compiled.register(self)

    def _apply(self, fn: Any, recurse: bool = True) -> Float8Linear:
        # Scalers follow the weight's device but keep their own dtypes (fp32/bool/int64).
        super()._apply(fn, recurse)
        if self.fp8_weight is not None:
            self.fp8_weight.invalidate()
        for scaler in (self.input_scaler, self.weight_scaler, self.grad_scaler):
            scaler.to(self.weight.device)
        self.compile_token = torch.zeros((), dtype=torch.int64, device=self.weight.device)  # meta holds no value to move
        if self.compact is not None:
            for _, part in self.compact.named():
                part.to(self.weight.device)
        return self

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        # Real values in the original dtype, not the 16-bit storage: the state dict of
        # the unconverted model.
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if not keep_vars and prefix + "weight" in destination:  # under FSDP2 with FP8 all-gather: the plain master
            destination[prefix + "weight"] = plain_master(destination[prefix + "weight"])
        if self.compact is not None:
            for name, part in self.compact.named():
                destination[prefix + name] = part.storage.value(part.storage.high_precision_dtype)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        # torch hands each module its own copy of the mapping to edit: real values are
        # swapped for their storage (setting the scale) before nn.Module copies them in.
        if self.compact is not None:
            for name, part in self.compact.named():
                value = state_dict.get(prefix + name)
                if isinstance(value, torch.Tensor) and value.shape == part.param.shape:
                    state_dict[prefix + name] = part.storage.load(value)
        super()._load_from_state_dict(state_dict, prefix, *args)
        if self.fp8_weight is not None:
            self.fp8_weight.invalidate()

    def extra_repr(self) -> str:
        storage = ", storage=float16+fp8 gradients" if self.compact is not None else ""
        storage += ", fp8 weight" if self.fp8_weight is not None else ""
        return f"{super().extra_repr()}, config={self.config}, enabled={self.enabled}{storage}"
