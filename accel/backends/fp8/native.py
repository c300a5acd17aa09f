"""The native FP8 backend: accel's own FP8 training on torch's float8 dtypes, on any device.

Every eligible nn.Linear becomes a Float8Linear, and every transformers Conv1D (GPT-2's linear
layer) a Float8Conv1D (same Parameters, same names, same layout), whose three GEMMs run
through torch._scaled_mm with TransformerEngine's delayed (or current) scaling.
By default the parameters, their gradients and the optimizer state stay as the base precision
keeps them (TransformerEngine's default: FP8 only inside the GEMMs). MS-AMP's optimization
levels, when asked for, change the storage of those layers (native_fp8.levels): under O1 and O2
their weights live in float16 (their real values, so reading a parameter gives its value) and
their gradients in FP8; under O2 Adam's moments for them are FP8 and float16 too.

Once per optimizer step: one device sync decides whether any FP8 tensor or gradient of the
step held inf or NaN (then the step is skipped, like a GradScaler skips an overflowing one,
and counted), the level updates the parameters, and the amaxes roll into their histories.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from accel.backends.base import Forward, WrappedOptimizer
from accel.backends.fp8.base import FP8Backend, register_fp8_backend
from accel.backends.fp8.health import Readings
from accel.backends.fp8.native_model import (
    FP8TrainingForward,
    scalers_of,
    shared_parameter_ids,
    unmatched_pattern_message,
)
from accel.backends.fp8.native_readings import fp8_stats, health_readings
from accel.backends.native_fp8 import (
    Float8Config,
    Float8Conv1D,
    Float8Linear,
    ScalerGroup,
    convert_linears,
    float8_layers,
    fused,
)
from accel.backends.native_fp8.compact import CompactGroup, CompactParameter
from accel.backends.native_fp8.data_parallel import any_process, broadcast_from_first, ignore_in_ddp
from accel.backends.native_fp8.fp8_weight import FP8Weight
from accel.backends.native_fp8.fsdp_weight import cast_shards, gather_in_fp8
from accel.backends.native_fp8.levels import LEVELS, OptimizationLevel
from accel.backends.native_fp8.optimizer_state import StatePreserver
from accel.backends.native_fp8.scaled_step import LevelStep
from accel.backends.native_fp8.weights import check_storable
from accel.kwargs_handlers import Handlers

logger = logging.getLogger("accel")

NATIVE_FSDP_STORAGE = (
    "O1/O2 keep each converted weight in float16 with a scale and its gradient in FP8 outside param.grad, "
    "averaged by accel's own all-reduce; fully_shard shards and reduce-scatters param.data and param.grad only, "
    "so that storage is not sharded."
)
"""Why O1/O2 storage does not run under FSDP2 on the native backend."""

FSDP_FP8_PARAMS_MODE = (
    "weights all-gathered in FP8 (fp8_params: each process keeps its shard in FP8 beside the high-precision "
    "master shard, cast once per optimizer step with the whole weight's scale, one all-reduce of the amaxes); "
    "gradients and optimizer state sharded in high precision (O1/O2 storage does not run under FSDP)"
)
FSDP_MODE = (
    "FP8 GEMMs on the weights FSDP gathers (in the base precision's dtype); weights, gradients and optimizer "
    "state sharded in high precision (O1/O2 storage does not run under FSDP)"
)

ROUNDING_SEED = 0x5EED
"""Seed of the stochastic-rounding generators: fixed, so that every process of a data-parallel
run (whose replicas must stay equal) and every rerun draws the same bits."""


@register_fp8_backend
class NativeFP8(FP8Backend):
    """FP8 GEMMs and MS-AMP's O1/O2 storage in plain PyTorch: CPU and GPU alike, the reference."""

    library = "native"
    scalings = ("delayed", "current")
    honoured_fields = frozenset(
        {
            "fp8_format",
            "margin",
            "amax_history_len",
            "amax_compute_algo",
            "optimization_level",
            "use_autocast_during_eval",
            "exclude_modules",
            "fp8_params",
        }
    )

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        recipe = self.recipe
        self.layer_config = Float8Config(
            fp8_format=recipe.fp8_format,
            margin=recipe.margin,
            amax_history_len=recipe.amax_history_len,
            amax_compute_algo=recipe.amax_compute_algo,
            scaling=self.scaling,
            count_stats=False,
        )
        level = recipe.optimization_level
        self.level: OptimizationLevel | None = LEVELS[level]() if level else None
        """O1/O2 storage of the converted layers, or None: parameters left as they are (the default)."""
        self.scalers = ScalerGroup({})
        self.skipped_steps = 0
        self._counting = False
        """Whether the FP8 casts count saturated and flushed values (FP8 health's report steps only)."""
        self.compact_parameters: dict[str, CompactParameter] = {}
        """Every parameter kept in O1/O2 storage, by qualified name."""
        self._compact_by_id: dict[int, CompactParameter] = {}
        self._groups: dict[int, CompactGroup] = {}
        self._generators: dict[str, torch.Generator] = {}
        self._state_preserver = StatePreserver(lambda param: id(param) in self._compact_by_id)
        self._scaled = self.loss_scaler is not None and self.loss_scaler.scaler.is_enabled()
        self._steppers: dict[int, LevelStep] = {}
        """Per optimizer, what the loss scaler steps (base_precision='fp16')."""
        self._fp8_weights: list[FP8Weight] = []
        """The FP8 weights of fp8_params, remade after each optimizer step that changed their masters."""
        self._sharded = False
        """Under FSDP2 (configure_fsdp): no O1/O2 storage; the FP8 GEMMs run on the gathered weights."""
        self._gathered_layers: list[Float8Linear | Float8Conv1D] = []
        """Under FSDP2 with fp8_params: the layers whose weights are all-gathered in FP8 (fsdp_weight.py)."""

    # ------------------------------------------------------------------ preparing
    def configure_fsdp(self) -> None:
        """Under FSDP2: the FP8 GEMMs run on the weights FSDP gathers; with fp8_params those are
        all-gathered in FP8 (native_fp8/fsdp_weight.py). O1/O2 storage is refused when asked for,
        and otherwise does not run (see NATIVE_FSDP_STORAGE)."""
        field = "optimization_level"
        if field in self.recipe.explicit_fields and self.recipe.optimization_level:
            raise ValueError(
                f"FP8RecipeKwargs({field}={self.recipe.optimization_level!r}) cannot run on backend='native' under "
                f"FSDP: {NATIVE_FSDP_STORAGE} Leave {field} out under FSDP (the FP8 GEMMs still run), or "
                "train under DDP (leave out the fsdp_plugin) to keep it."
            )
        self._sharded = True
        self.fsdp_mode = FSDP_FP8_PARAMS_MODE if self.recipe.fp8_params else FSDP_MODE

    def _describe_level(self, level: str) -> str:
        return "" if self._sharded else level

    def _describe_kernels(self) -> str:
        # Only the unusual case is said: the fused CPU kernels could not be compiled here.
        return ", eager CPU kernels" if self.device.type == "cpu" and not fused.available() else ""

    def convert_module(self, module: nn.Module) -> nn.Module:
        module = self.convert_base(module)
        report = convert_linears(
            module, exclude_modules=self.recipe.exclude_modules, make_layer=self._make_layer, make_conv1d=self._make_conv1d,
            small_layers=self.small_layers,
        )
        self._record_conversion(report)
        if self.device.type == "cpu":
            logger.info("native FP8 on the CPU: quantization kernels %s", fused.status())
        for pattern in report.unmatched_patterns:
            warnings.warn(unmatched_pattern_message(pattern, report), UserWarning, stacklevel=5)
        self.scalers = ScalerGroup({**self.scalers.scalers, **scalers_of(module)})
        self.count_health(self._counting)
        if self.level is not None and not self._sharded:
            self._make_compact(module, self.level)
        if self.recipe.fp8_params and self._sharded:  # FSDP2 gathers them in FP8, cast per shard after each step
            for layer in float8_layers(module).values():
                layer.fp8_weight = gather_in_fp8(layer, layer.weight_scaler)
                self._fp8_weights.append(layer.fp8_weight)
                self._gathered_layers.append(layer)
        elif self.recipe.fp8_params:
            self._fp8_weights.extend(layer.keep_fp8_weight() for layer in float8_layers(module).values())
        return module

    def _make_layer(self, linear: nn.Linear) -> Float8Linear:
        return Float8Linear.from_linear(linear, self.layer_config)

    def _make_conv1d(self, conv1d: nn.Module) -> Float8Conv1D:
        return Float8Conv1D.from_conv1d(conv1d, self.layer_config)

    def _make_compact(self, model: nn.Module, level: OptimizationLevel) -> None:
        """Give every FP8 layer O1/O2 storage, except layers whose parameters other modules share."""
        shared = shared_parameter_ids(model)
        kept, made = [], {}
        for name, layer in float8_layers(model).items():
            if layer.compact is None and any(id(p) in shared for p in layer.parameters(recurse=False)):
                kept.append(name)
                continue
            if layer.compact is None:
                check_storable(name, layer.named_parameters(recurse=False), level.name)
            compact = layer.make_compact()
            compact.set_generator(self._generator(layer.weight.device))
            made.update({f"{name}.{part_name}": part for part_name, part in compact.named()})
        self.compact_parameters.update(made)
        self._compact_by_id.update({id(part.param): part for part in made.values()})
        # DDP neither averages nor broadcasts these: the backend does (native_fp8.distributed).
        ignore_in_ddp(model, list(made))
        broadcast_from_first([t for part in made.values() for t in (part.param.data, part.storage.scale_inv)])
        if kept:
            logger.info(
                "FP8 %s: %d layer(s) keep float32 weights and gradients because other modules share their "
                "parameters (they still compute in FP8): %s",
                level.name, len(kept), ", ".join(kept),
            )

    def _generator(self, device: torch.device) -> torch.Generator | None:
        if device.type == "meta":
            return None
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(ROUNDING_SEED)
        return self._generators[key]

    def wrap_forward(self, forward: Forward) -> Forward:
        layers = list(float8_layers(forward.__self__).values())  # type: ignore[attr-defined]  # a bound method
        return FP8TrainingForward(forward, self.base, layers, self.recipe.use_autocast_during_eval)

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        super().check_optimizer(optimizer)
        if self.level is not None:
            self.level.check_optimizer(optimizer)

    def after_prepare(self, models: Sequence[nn.Module], optimizers: Sequence[WrappedOptimizer]) -> None:
        for wrapped in optimizers:
            optimizer = wrapped.optimizer
            self._groups[id(optimizer)] = CompactGroup(optimizer, self._compact_by_id)
            self._state_preserver.install(optimizer)

    # ------------------------------------------------------------------ the step
    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Materialise the compact parameters' values and FP8 gradients in float32, for clipping;
        with loss scaling (base_precision='fp16') also divide every gradient by the loss scale."""
        group = self._groups.get(id(optimizer))
        if group is not None:
            group.materialise()
        if self._scaled:
            self._unscale_scaled(optimizer, group)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Drop the FP8 gradients of the optimizer's compact parameters, as torch drops ``param.grad``:
        a backward followed by zero_grad() and no step leaves nothing for the next step."""
        group = self._groups.get(id(optimizer))
        if group is not None:
            group.drop_gradients()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        group = self._groups.get(id(optimizer))
        if group is not None and not len(group):
            group = None
        if closure is not None and group is not None:
            raise NotImplementedError(
                "optimizer.step(closure) cannot run with "
                f"FP8RecipeKwargs(optimization_level={self.recipe.optimization_level!r}): "
                "the gradients of FP8 layers are held in FP8 outside param.grad, where a closure's backward "
                "cannot reach the optimizer. Call accelerator.backward(loss) and then optimizer.step()."
            )
        if self._scaled:
            return self._scaled_step(optimizer, group, closure)
        overflow = bool(self._fp8_nonfinite(group))  # the one device sync of the step
        if overflow and group is not None:
            group.discard()
        elif group is not None and self.level is not None:  # a non-empty group: O1/O2 storage
            self.level.step(optimizer, group)
        elif not overflow:
            optimizer.step(closure) if closure is not None else optimizer.step()
        self._after_step(stepped=not overflow)
        return not overflow

    def _after_step(self, stepped: bool) -> None:
        """Roll the amax histories; after a step that ran, the FP8 weights (fp8_params) are cast anew."""
        self.scalers.update()
        self.skipped_steps += not stepped
        if stepped:
            for fp8_weight in self._fp8_weights:
                fp8_weight.invalidate()
            if self._gathered_layers:  # with the scales just updated, as a first forward would cast them
                cast_shards(self._gathered_layers)

    def _fp8_nonfinite(self, group: CompactGroup | None) -> torch.Tensor:
        """0-dim bool tensor, the same on every process: did an FP8 tensor or FP8 gradient hold inf/NaN?"""
        nonfinite = self.scalers.found_nonfinite()
        found = group.found_nonfinite() if group is not None else None  # None when the group is empty
        if found is not None:
            nonfinite = nonfinite | found
        return any_process(nonfinite)

    def _unscale_scaled(self, optimizer: torch.optim.Optimizer, group: CompactGroup | None) -> None:
        """The loss scaler's unscale_, which also counts an FP8 inf/NaN as found, so that the scale backs off."""
        assert self.loss_scaler is not None
        stepper = self._steppers.setdefault(id(optimizer), LevelStep(optimizer, group, self.level))
        self.loss_scaler.unscale_(stepper)  # type: ignore[arg-type]  # LevelStep stands in for the optimizer
        nonfinite = self._fp8_nonfinite(group)
        for found in self.loss_scaler.scaler._found_inf_per_device(stepper).values():  # type: ignore[arg-type]  # as above
            found.add_(nonfinite.to(found.dtype))
        stepper.unscaled = True

    def _scaled_step(
        self, optimizer: torch.optim.Optimizer, group: CompactGroup | None, closure: Callable[[], Any] | None
    ) -> bool:
        """fp16 base: unscale (materialising FP8 gradients first), then the loss scaler steps the level or skips."""
        assert self.loss_scaler is not None
        stepper = self._steppers.setdefault(id(optimizer), LevelStep(optimizer, group, self.level))
        if not stepper.unscaled:
            self.unscale_(optimizer)
        stepper.group = group
        stepped = self.loss_scaler.step(stepper, closure)  # type: ignore[arg-type]  # LevelStep stands in for the optimizer
        stepper.unscaled = False
        if not stepped and group is not None:
            group.discard()
        self._after_step(stepped)
        return stepped

    # ------------------------------------------------------------------ reading and saving
    def held_tensors(self) -> dict[str, list[torch.Tensor]]:
        """O1/O2: each converted parameter's float16 storage scale, and its FP8 gradient with its scales."""
        parts = list(self._compact_by_id.values())
        return {"parameters": [part.storage.scale_inv for part in parts],
                "gradients": [t for part in parts for t in (part.grad.data, part.grad.scale_inv, part.grad.step_amax)
                              if t is not None]}

    def stats(self) -> dict[str, float]:
        return {**self.base.stats(), "skipped_steps": self.skipped_steps}

    def count_health(self, on: bool) -> None:
        """Switch the saturated/flushed counts of every scaler (extra passes over every FP8 tensor,
        measured 15% of a step of the transformers Llama benchmark) on for the coming step, or off."""
        self._counting = on
        for scaler in self.scalers.scalers.values():
            scaler.count_stats = on

    def health(self) -> Readings:
        """Per FP8 tensor: amax and scale of the last step, and under FP8 health's counting the
        saturated share of the values cast and the flushed share of the nonzero ones (one device
        sync for the whole model). O1/O2's FP8 gradients ('<layer>.weight_grad'): amax and scale."""
        return health_readings(self.scalers, self.compact_parameters)

    def fp8_stats(self) -> dict[str, dict[str, float]]:
        """Per tensor of every FP8 layer, its last step's amax and scale, and the over/underflow
        counts of the last step that counted them (FP8 health's report steps, health_interval).

        Keys: ``"<layer>.input"``, ``".weight"``, ``".grad_output"`` for the GEMM operands;
        under O1/O2 also ``"<layer>.weight_grad"`` / ``".bias_grad"`` for the FP8 gradients.
        """
        return fp8_stats(self.scalers, self.compact_parameters)

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.base_state_dict(),
            "scaling": self.scalers.state_dict(),
            "skipped_steps": self.skipped_steps,
            "rounding": {device: generator.get_state() for device, generator in self._generators.items()},
            "gradients": {
                name: part.grad.state_dict() for name, part in self.compact_parameters.items() if part.grad.data is not None
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_base_state_dict(state)
        self.scalers.load_state_dict(state["scaling"])
        self.skipped_steps = int(state["skipped_steps"])
        for device, generator_state in state.get("rounding", {}).items():
            generator = self._generator(torch.device(device))
            if generator is not None:
                generator.set_state(generator_state)
        gradients = state.get("gradients", {})
        unknown = sorted(set(gradients) - set(self.compact_parameters))
        if unknown:
            raise ValueError(f"FP8 gradient state names parameters this model does not hold in FP8: {unknown[:8]}")
        for name, part in self.compact_parameters.items():
            part.grad.load_state_dict(gradients.get(name, {}))
        for fp8_weight in self._fp8_weights:  # the weights are loaded too: cast again at their next use
            fp8_weight.invalidate()

    def teardown(self) -> None:
        self._state_preserver.remove()
