"""The Quantizer: what the Accelerator calls to quantize prepared models with bitsandbytes.

`create_quantizer` checks at construction that the asked mode can run here (else raises with the
reason); `convert` swaps a model's Linear layers and keeps the report; `init_context` builds models
quantized from the start; `model_state_dict` gives quantized or dequantized weights; and
`check_optimizer` refuses an optimizer that still holds the full-precision weights quantization replaced.
"""

from __future__ import annotations

import contextlib
import weakref
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch
from torch import nn

from accel._warnings import warn_once
from accel.backends.capability import slow_dtype_reason
from accel.kwargs_handlers import Handlers
from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs
from accel.quantization import capability
from accel.quantization.modes import MODES, compute_dtype
from accel.quantization.plan import QuantizationReport, plan_quantization

_COMPUTE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class _Precision(Protocol):
    name: str
    compute_dtype: torch.dtype


class Quantizer:
    """Quantizes the nn.Linear layers of prepared models in one bitsandbytes mode."""

    def __init__(self, options: BitsandbytesKwargs, dtype: torch.dtype, device: torch.device) -> None:
        capability.import_bitsandbytes()
        self.options = options
        self.mode = MODES[options.mode]
        self.compute_dtype = dtype
        self.device = device
        self.reports: list[QuantizationReport] = []
        """One report per converted model, in the order they were prepared."""
        self._replaced: dict[int, tuple[weakref.ref[torch.Tensor], str]] = {}
        """id -> (weak reference, qualified name) of the weights quantization replaced by frozen ones."""

    @property
    def report(self) -> QuantizationReport | None:
        """The report of the model converted last (None before any)."""
        return self.reports[-1] if self.reports else None

    def describe(self) -> str:
        """What runs, for a log line: "bitsandbytes nf4-dq (4-bit NF4 frozen weights, ..., compute bfloat16)"."""
        return f"bitsandbytes {self.mode.name} ({self.mode.describe()}, compute {str(self.compute_dtype).removeprefix('torch.')})"

    def convert(self, model: nn.Module) -> nn.Module:
        """Replace, in place, the model's nn.Linear layers by quantized ones; return the model.

        Raises ValueError when the model has no Linear that is or can be quantized; warns about an
        ignore_modules pattern that matches no module.
        """
        from accel.quantization.convert import quantize_model
        from accel.quantization.layers import is_quantized_layer

        report = plan_quantization(model, self.mode.name, self.options.ignore_modules, is_quantized_layer)
        if report.num_quantized == 0:
            raise ValueError(
                f"BitsandbytesKwargs(mode={self.mode.name!r}): {type(model).__name__} has no nn.Linear layer to "
                f"quantize, so nothing would be quantized. {report.details()}\nRemove BitsandbytesKwargs for this "
                "model, or narrow ignore_modules."
            )
        if report.unmatched_patterns:
            names = ", ".join(map(repr, report.unmatched_patterns))
            warn_once(f"BitsandbytesKwargs.ignore_modules: {names} matched no module of {type(model).__name__}.", UserWarning)
        for weight, decision in zip(quantize_model(model, report, self.mode, self.compute_dtype), report.converted):
            if not self.mode.trainable_weight:
                self._replaced[id(weight)] = (weakref.ref(weight), f"{decision.name}.weight")
        self.reports.append(report)
        return model

    def init_context(self) -> AbstractContextManager[Any]:
        """The context of `accelerator.init_module()`: nn.Linear is built quantized from the start."""
        from accel.quantization.convert import building_quantized

        if self.options.ignore_modules:
            raise ValueError(
                f"init_module() with BitsandbytesKwargs(ignore_modules={self.options.ignore_modules!r}) cannot run: "
                "inside init_module() layers are quantized as they are built, before their names are known. Build "
                "the model outside init_module() (prepare quantizes it), or drop ignore_modules."
            )
        return building_quantized(self.mode, self.compute_dtype)

    def model_state_dict(
        self, model: nn.Module, dequantize: bool = False, gathered: dict[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """The model's weights: quantized with their quant state (default), or dequantized to floating point.

        `gathered`: the full state_dict of a model sharded by FSDP (as the strategy gathered it), whose
        4-bit weights are dequantized from their gathered packed values.
        """
        from accel.quantization.state_dict import dequantize_gathered, dequantized_state_dict, quantized_state_dict

        if gathered is not None:
            return dequantize_gathered(gathered, model) if dequantize else gathered
        return dequantized_state_dict(model) if dequantize else quantized_state_dict(model)

    def check_sharding(self, ram_efficient_loading: bool = False) -> None:
        """Raise ValueError, at construction, when this mode cannot be sharded by FSDP2 (fsdp_plugin), or
        not with `ram_efficient_loading` (the plugin's cpu_ram_efficient_loading).

        The 4-bit modes shard: each frozen packed weight is split over the processes like any other
        parameter and all-gathered for its layer's forward, its quant state (a few scales) kept whole on
        every process. The int8 modes keep their row scales beside the weight, outside any parameter, so
        a shard would be multiplied by the wrong scales; int8-training re-quantizes its trainable weight
        from a copy FSDP frees after each forward. Example: `Accelerator(fsdp_plugin=plugin,
        kwarg_handlers=[BitsandbytesKwargs(mode="nf4", dtype=torch.float32)])` runs QLoRA sharded.
        """
        if self.mode.is_4bit and ram_efficient_loading:
            raise ValueError(
                f"BitsandbytesKwargs(mode={self.mode.name!r}) with FullyShardedDataParallelPlugin("
                "cpu_ram_efficient_loading=True) cannot run: accel quantizes the Linear layers in prepare, on every "
                "process, and does not send process 0's packed weights and quant states into the other processes' "
                "shards. Set cpu_ram_efficient_loading=False (fsdp_cpu_ram_efficient_loading: false): each process "
                "quantizes its own copy, built from the same checkpoint or seed."
            )
        if self.mode.is_4bit:
            return
        raise ValueError(
            f"BitsandbytesKwargs(mode={self.mode.name!r}) with fsdp_plugin (use_fsdp) cannot run: FSDP2 shards only "
            "the 4-bit modes' frozen packed weights; the int8 modes keep row scales outside the weight that a shard "
            "cannot carry. Use mode 'nf4', 'nf4-dq', 'fp4' or 'fp4-dq' (QLoRA) with FSDP, or keep "
            f"{self.mode.name!r} without fsdp_plugin (DDP replicates the quantized model on every process)."
        )

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Raise ValueError when `optimizer` holds full-precision weights that quantization replaced."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        stale = [entry[1] for p in params if (entry := self._replaced.get(id(p))) is not None and entry[0]() is p]
        if not stale:
            return
        shown = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
        raise ValueError(
            f"{type(optimizer).__name__} holds {len(stale)} full-precision weights that BitsandbytesKwargs(mode="
            f"{self.mode.name!r}) replaced by frozen quantized ones ({shown}): it would never update them and would "
            "keep them in memory. Build the optimizer after prepare(model), over the parameters that train: "
            "[p for p in model.parameters() if p.requires_grad] (QLoRA: the adapters), or use "
            "mode='int8-training' to train the Linear weights themselves."
        )


def create_quantizer(handlers: Handlers, precision: _Precision, device: torch.device) -> Quantizer | None:
    """The Quantizer the user's BitsandbytesKwargs asks for (None without one), checked against the
    precision and the device: raises here, at construction, if it cannot run."""
    if not handlers.supplies(BitsandbytesKwargs):  # given in the code, or by accel launch (ACCEL_BNB_*)
        return None
    options = handlers.get(BitsandbytesKwargs)
    if precision.name == "fp8":
        raise ValueError(
            f"BitsandbytesKwargs(mode={options.mode!r}) with mixed_precision='fp8' cannot run: both replace the "
            "model's nn.Linear layers (FP8 GEMMs or quantized weights). Choose one: another mixed_precision "
            "('bf16', 'fp16', 'no', ...) with BitsandbytesKwargs, or 'fp8' without it."
        )
    dtype = compute_dtype(options, precision.compute_dtype)
    if dtype not in _COMPUTE_DTYPES:
        raise ValueError(
            f"BitsandbytesKwargs(mode={options.mode!r}) with mixed_precision={precision.name!r} would compute in {dtype}, "
            "which bitsandbytes layers do not; pass BitsandbytesKwargs(dtype=torch.float32) (or bf16/fp16)."
        )
    if capability.bitsandbytes_missing_reason() is not None:
        raise ModuleNotFoundError(f"BitsandbytesKwargs(mode={options.mode!r}): {capability.bitsandbytes_missing_reason()}")
    reason = capability.mode_reason(options.mode, device)
    if reason is not None:
        raise RuntimeError(f"BitsandbytesKwargs(mode={options.mode!r}) cannot run on {device}: {reason}.")
    slow = slow_dtype_reason(device, dtype)
    if slow is not None:
        warn_once(
            f"BitsandbytesKwargs(mode={options.mode!r}) computes in {dtype} and will be slow here: {slow}. It runs as asked."
        )
    return Quantizer(options, dtype, device)


def no_quantization() -> AbstractContextManager[Any]:
    """What `init_module()` enters when there is no quantizer (for a single code path in the caller)."""
    return contextlib.nullcontext()
