"""The `ao` FP8 backend: torchao float8 training (`convert_to_float8_training`), on CPU and CUDA FP8 GPUs.

Every nn.Linear that accel's eligibility rule accepts becomes torchao's Float8Linear (same
weight and bias Parameters, same names), whose GEMMs run in FP8 with dynamic scaling: per
tensor (`scaling='current'`, the default) or per row; `scaling='mxfp8'` runs torchao's MXFP8
training instead (ao_mxfp8.py: Blackwell GPUs, and emulated on CPU). torchao keeps no scaling state, so a
checkpoint holds nothing beyond the weights. A step whose gradients hold inf or NaN is skipped.

On CPU, torch routes FP8 GEMMs of same-dtype operands to oneDNN's reference kernel on CPUs with
AMX (measured ~250x slower than torch's own kernel on a 256-wide MLP): the forward wrapper and
`accelerator.backward` turn oneDNN off while FP8 runs. A bare `loss.backward()` does not.

Under FSDP2 (configure_fsdp) tensorwise scaling all-gathers the weights in FP8 (ao_fsdp.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from accel._warnings import warn_once
from accel.backends.base import Forward, PrecisionBackend, WrappedOptimizer
from accel.backends.capability import cuda_fp8_reason
from accel.backends.conversion import FP8_ALIGNMENT, plan_conversion
from accel.backends.fp8.ao_fsdp import (
    EVAL_IN_FP8_REFUSAL,
    EVAL_IN_FP8_WARNING,
    FP8_ALL_GATHER_MODE,
    forget_scales,
    fp8_gathered_models,
    high_precision_all_gather_mode,
    precompute_scales,
)
from accel.backends.fp8.ao_import import import_torchao
from accel.backends.fp8.ao_mxfp8 import (
    MXFP8_ALIGNMENT_REASON,
    MXFP8_BLOCK,
    MXFP8Forward,
    convert_mxfp8,
    is_mxfp8_linear,
    mxfp8_config,
    plain_values,
)
from accel.backends.fp8.ao_recipe import (
    AO_RECIPES,
    FSDP_FP8_ALL_GATHER,
    ROWWISE_FORMAT,
    float8_config,
    high_precision_config,
)
from accel.backends.fp8.base import FP8Backend, register_fp8_backend
from accel.backends.fp8.base_precision import FP8Forward
from accel.backends.fp8.health import Readings
from accel.backends.fp8.health_readers import ao_readings
from accel.backends.fp8.support import check_fixed_fields, library_version, module_present, too_old_reason
from accel.backends.fp8.te_convert import ParameterMap
from accel.kwargs_handlers import Handlers

MIN_AO_VERSION = (0, 10)
AO_CONV1D_REASON = (
    "transformers' Conv1D (a Linear with its weight stored transposed, as in GPT-2) is not converted: torchao's "
    "convert_to_float8_training swaps nn.Linear only; backend='native' converts Conv1D"
)
INSTALL_AO = "install it with: pip install torchao (or accel's extra: pip install 'accel[ao]')"


class AOForward(FP8Forward):
    """FP8 while the model trains (high precision in eval unless asked), in the base precision; oneDNN
    off on CPU meanwhile."""

    __slots__ = ("_layers", "_configs", "_fp8_in_eval", "_cpu", "_on")

    def __init__(self, forward: Forward, base: PrecisionBackend, layers: list[nn.Module], configs: tuple[Any, Any],
                 fp8_in_eval: bool, cpu: bool) -> None:
        super().__init__(forward, base)
        self._layers = layers
        self._configs = configs  # (high precision, FP8)
        self._fp8_in_eval = fp8_in_eval
        self._cpu = cpu
        self._on = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        want = self.module.training or self._fp8_in_eval
        if want is not self._on:
            for layer in self._layers:
                layer.config = self._configs[want]
            self._on = want
        if not (want and self._cpu):
            return self._run(*args, **kwargs)
        return without_onednn(self._run, *args, **kwargs)


@register_fp8_backend
class TorchAOFP8(FP8Backend):
    """FP8 through torchao's Float8Linear, dynamic (current) scaling per tensor or per row."""

    library = "ao"
    scalings = (*AO_RECIPES, "mxfp8")
    honoured_fields = frozenset({"fp8_format", "use_autocast_during_eval", "exclude_modules", "fp8_params"})
    refusals = {
        "fp8_params": (
            "torchao's float8 training keeps the weights in high precision and casts them to FP8 for each GEMM "
            "(under FSDP its enable_fsdp_float8_all_gather casts them for the all-gather only, which accel turns "
            "on there by itself). Use backend='native' or 'te' for FP8 weights."
        ),
    }

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        self.mxfp8 = self.scaling == "mxfp8"
        self.ao_config = mxfp8_config(device) if self.mxfp8 else float8_config(self.recipe, self.scaling)
        self._params = ParameterMap()
        """mxfp8: the weights torchao's conversion replaced by new Parameters (optimizers are re-pointed)."""
        self._eval_config = high_precision_config()
        self._cpu = device.type == "cpu"
        self.skipped_steps = 0
        self._fp8_in_eval = self.recipe.use_autocast_during_eval
        self._fp8_gathered: list[nn.Module] = []
        """Prepared models whose weights FSDP2 all-gathers in FP8: their scales are precomputed after each step."""

    def configure_fsdp(self) -> None:
        """Under FSDP2: tensorwise scaling all-gathers the weights in FP8 (then evaluation runs in FP8 too);
        the rowwise recipes gather them in the base precision; MXFP8 is refused."""
        if self.mxfp8:
            raise ValueError(
                "FP8RecipeKwargs(backend='ao', scaling='mxfp8') cannot run under FSDP in accel: torchao's MXFP8 "
                "training tensors are not tested sharded here. Use scaling='current' (FP8 all-gather) or 'rowwise' "
                "under FSDP, or mxfp8 under DDP (leave out the fsdp_plugin)."
            )
        if self.scaling not in FSDP_FP8_ALL_GATHER:
            self.fsdp_mode = high_precision_all_gather_mode(self.scaling)
            return
        if "use_autocast_during_eval" in self.recipe.explicit_fields and not self.recipe.use_autocast_during_eval:
            raise ValueError(EVAL_IN_FP8_REFUSAL)
        if not self.recipe.use_autocast_during_eval:
            warn_once(EVAL_IN_FP8_WARNING)
        self.ao_config = float8_config(self.recipe, self.scaling, fsdp_float8_all_gather=True)
        self._fp8_in_eval = True
        self.fsdp_mode = FP8_ALL_GATHER_MODE

    @classmethod
    def availability(cls, device: torch.device) -> str | None:
        """None when torchao can run FP8 training on `device` (a CPU, or a CUDA GPU with FP8)."""
        reasons: list[str | None] = []
        if not module_present("torchao"):
            reasons.append(f"torchao is not installed ({INSTALL_AO})")
        else:
            reasons.append(too_old_reason("torchao", library_version(None, ("torchao",)), MIN_AO_VERSION, INSTALL_AO))
        if device.type == "cuda":
            reasons.append(cuda_fp8_reason(device))
        elif device.type != "cpu":
            reasons.append(f"torchao float8 training runs on CPU and CUDA GPUs, not on {device.type}")
        return "; ".join(r for r in reasons if r) or None

    def _check_recipe(self) -> None:
        if self.scaling == "delayed":
            raise ValueError(
                "FP8RecipeKwargs(scaling='delayed') cannot run on the 'ao' FP8 backend: torchao removed delayed "
                "scaling and scales from the current tensor. Use scaling='current' (per tensor, the default), "
                "'rowwise' or 'rowwise_with_gw_hp', or a backend with delayed scaling ('native', 'te')."
            )
        if self.scaling != "current":
            why = ("torchao's MXFP8 is E4M3 with block scales throughout" if self.scaling == "mxfp8"
                   else f"torchao's {self.scaling} recipe casts gradients to E4M3 too")
            check_fixed_fields(self.recipe, {"fp8_format": ROWWISE_FORMAT}, self.library, why)
        super()._check_recipe()

    def convert_module(self, module: nn.Module) -> nn.Module:
        import_torchao()
        from torchao.float8 import convert_to_float8_training

        module = self.convert_base(module)
        report = plan_conversion(
            module, exclude_modules=self.recipe.exclude_modules,
            is_converted=lambda m: _is_float8_linear(m) or is_mxfp8_linear(m), conv1d_refusal=AO_CONV1D_REASON,
            alignment=MXFP8_BLOCK if self.mxfp8 else FP8_ALIGNMENT,
            alignment_reason=MXFP8_ALIGNMENT_REASON if self.mxfp8 else "", small_layers=self.small_layers,
        )
        self._record_conversion(report)
        modules = dict(module.named_modules())
        chosen = {id(modules[d.name]) for d in report.converted}
        if self.mxfp8:
            convert_mxfp8(module, chosen, self.ao_config, self._params)
            return module
        convert_to_float8_training(module, module_filter_fn=lambda m, _fqn: id(m) in chosen, config=self.ao_config)
        if self._cpu and self.recipe.base_precision in AUTOCAST_BASES:
            for layer in module.modules():
                if _is_float8_linear(layer):
                    layer.register_forward_pre_hook(_input_to_cpu_autocast_dtype)
        return module

    health_gaps = (
        "the inputs and output gradients (torchao scales each from its own amax inside the GEMM and keeps "
        "neither amax nor scale); weights are read at report steps."
    )

    def health(self) -> Readings:
        """Per torchao Float8Linear, its weight's amax, scale and cast fractions (health_readers.py)."""
        return ao_readings(self.health_models, self.ao_config)

    def wrap_forward(self, forward: Forward) -> Forward:
        if self.mxfp8:
            return MXFP8Forward(forward, self.base, self._fp8_in_eval)
        layers = [m for m in forward.__self__.modules() if _is_float8_linear(m)]  # type: ignore[attr-defined]  # a bound method
        configs = (self._eval_config, self.ao_config)
        return AOForward(forward, self.base, layers, configs, self._fp8_in_eval, self._cpu)

    def after_prepare(self, models: Sequence[nn.Module], optimizers: Sequence[WrappedOptimizer]) -> None:
        for wrapped in optimizers:  # mxfp8: optimizers built before prepare now step torchao's weights
            self._params.remap(wrapped.optimizer)
        if not self.mxfp8 and self.ao_config.enable_fsdp_float8_all_gather:
            self._fp8_gathered = fp8_gathered_models(models)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        if self._cpu:
            without_onednn(self.base.backward, loss, **kwargs)
        else:
            self.base.backward(loss, **kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        """Step unless a gradient holds inf or NaN (then count the step as skipped); with an fp16
        base the loss scaler decides (and lowers the scale). Under FSDP with FP8 all-gather, a step
        that ran is followed by the weights' new scales (one all-reduce)."""
        stepped = self._step(optimizer, closure)
        if stepped and self._fp8_gathered:
            precompute_scales(self._fp8_gathered)
        return stepped

    def _step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> bool:
        if self.loss_scaler is not None:
            return self.base.optimizer_step(optimizer, closure)
        if closure is not None:
            optimizer.step(closure)
            return True
        if _has_nonfinite_grad(optimizer):  # under FSDP the DTensor norms are reduced over all shards
            self.skipped_steps += 1
            return False
        optimizer.step()
        return True

    def _describe_kernels(self) -> str:
        if self.mxfp8 and self._cpu:
            return ", torchao's MXFP8 emulation: MXFP8 values, products on the dequantized values (slow)"
        return ""

    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The weights; mxfp8's as the plain tensors inside torchao's training-tensor wrappers."""
        return plain_values(model.state_dict()) if self.mxfp8 else model.state_dict()

    def stats(self) -> dict[str, float]:
        return {"skipped_steps": self.skipped_steps, **self.base.stats()}

    def state_dict(self) -> dict[str, Any]:
        """torchao's dynamic scaling keeps no state: the count of skipped steps (and a loss scaler's state)."""
        return {**self.base_state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the count (and a loss scaler); the weights are being loaded too, so precomputed
        FP8 all-gather scales are dropped and computed anew by the next all-gathers."""
        self.load_base_state_dict(state)
        self.skipped_steps = int(state["skipped_steps"])
        forget_scales(self._fp8_gathered)


AUTOCAST_BASES = ("bf16", "fp16")
"""Base precisions that run the model under torch.autocast."""


def _input_to_cpu_autocast_dtype(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """torchao's Float8Linear casts its input to the autocast dtype under CUDA autocast only (as F.linear
    does); this does the same under CPU autocast, so that its backward sees one dtype."""
    if not torch.is_autocast_enabled("cpu"):
        return None
    return (args[0].to(torch.get_autocast_dtype("cpu")), *args[1:])


def without_onednn(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `function` with oneDNN off (process-wide, for the duration of the call)."""
    previous = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        return function(*args, **kwargs)
    finally:
        torch._C._set_mkldnn_enabled(previous)


def _has_nonfinite_grad(optimizer: torch.optim.Optimizer) -> bool:
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not grads:
        return False
    largest = torch.stack([norm.float() for norm in torch._foreach_norm(grads, float("inf"))])
    return not bool(torch.isfinite(largest).all())


def _is_float8_linear(module: nn.Module) -> bool:
    from torchao.float8.float8_linear import Float8Linear

    return isinstance(module, Float8Linear)
