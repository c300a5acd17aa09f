"""FP8Backend: the base class of the FP8 backends, and the registry through which they are found.

The recipe and its checks (a field set explicitly that a backend cannot honour raises), the base
precision that runs outside the FP8 products (base_precision.py), the conversion report and the
statistics. Each adapter (native.py, te.py, ao.py, msamp.py) subclasses FP8Backend and registers
itself with `register_fp8_backend`; choice.py imports them and picks one.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
from torch import nn

from accel.backends.base import PrecisionBackend
from accel.backends.conversion import ConversionReport
from accel.backends.fp8.base_precision import create_base, loss_scaler_of
from accel.backends.fp8.health import HealthMonitor, HealthSink, Readings
from accel.backends.fp8.small_layers import small_layer_rule
from accel.backends.masters import UpcastParameter
from accel.kwargs_handlers import AutocastKwargs, FP8RecipeKwargs, GradScalerKwargs, Handlers, KwargsHandler

logger = logging.getLogger("accel")

EVERY_BACKEND_HONOURS = frozenset({"backend", "scaling", "base_precision", "small_layer_dim", "health_interval"})
"""Recipe fields that every FP8 backend honours (the small-layer filter is applied by plan_conversion)."""
FSDP_BASE_NAMES = {"fp32": "no"}
"""FP8RecipeKwargs.base_precision -> the precision name accel.fsdp.precision knows it by (others are the same)."""


class FP8Backend(PrecisionBackend):
    """Base of the FP8 backends: the recipe, its checks, the conversion report and statistics."""

    name = "fp8"
    compute_dtype = torch.float8_e4m3fn
    handler_types: ClassVar[tuple[type[KwargsHandler], ...]] = (FP8RecipeKwargs,)
    library: ClassVar[str] = ""
    """The backend's name in FP8RecipeKwargs(backend=...)."""
    scalings: ClassVar[tuple[str, ...]] = ()
    """The `scaling` values this backend runs; the first is its default."""
    honoured_fields: ClassVar[frozenset[str]] = frozenset()
    """Recipe fields this backend honours when the user sets them (besides EVERY_BACKEND_HONOURS)."""
    refusals: ClassVar[dict[str, str]] = {}
    """Why this backend cannot honour a field, for fields whose refusal needs its reason (field -> reason)."""
    health_gaps: ClassVar[str] = ""
    """What this backend's health reports cannot include, and why (said once, in the first summary line)."""

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        self.recipe = handlers.get(FP8RecipeKwargs)
        self.scaling = self.recipe.scaling or self.scalings[0]
        self._check_recipe()
        self.small_layers = small_layer_rule(self.recipe.small_layer_dim, self.scaling, device)
        """The small-layer filter every backend passes to plan_conversion (small_layers.py)."""
        self.base = create_base(self.recipe.base_precision, device, handlers)
        """The precision of everything outside the FP8 GEMMs (base_precision.py)."""
        self.loss_scaler = loss_scaler_of(self.base)
        # class-level defaults of PrecisionBackend, set here per instance from the base precision and its scaler
        self.param_dtype = self.base.param_dtype  # type: ignore[misc]  # per instance
        self.orphan_optimizer_is_error = self.base.orphan_optimizer_is_error  # type: ignore[misc]  # per instance
        if self.loss_scaler is not None and GradScalerKwargs not in self.handler_types:
            self.handler_types = (*self.handler_types, GradScalerKwargs)  # type: ignore[misc]  # per instance
        self.conversion_report: ConversionReport | None = None
        self.selection = f"FP8 backend {self.library!r}: asked for by name"
        """Why this backend runs: asked by name, or chosen by `auto` (and why not the others)."""
        self.fsdp_mode = ""
        """Under FSDP2 (configure_fsdp): how the FP8 layers run sharded, for describe() and the conversion report."""
        self.health_models: list[nn.Module] = []
        """The models converted since FP8 health was switched on (empty when it is off)."""

    def describe(self) -> str:
        level = self._describe_level(self._level_name())
        params = ", fp8_params" if self.recipe.fp8_params else ""
        sharded = f", FSDP2: {self.fsdp_mode}" if self.fsdp_mode else ""
        base = f"base {self.recipe.base_precision}"
        return f"fp8 ({self.library}, {self.scaling} scaling{level}, {base}{params}{sharded}{self._describe_kernels()})"

    def _level_name(self) -> str:
        """describe()'s optimization level (", O1"): the recipe's, where this backend honours the field."""
        level = self.recipe.optimization_level
        return f", {level}" if level and "optimization_level" in self.honoured_fields else ""

    def _describe_level(self, level: str) -> str:
        """The optimization level's part of describe(); a backend whose storage differs under FSDP says so."""
        return level

    def _describe_kernels(self) -> str:
        """describe()'s note on kernels that run slower than usual here; default: none."""
        return ""

    @property
    def fp8_recipe_in_effect(self) -> tuple[str, FP8RecipeKwargs]:
        return self.library, self.recipe

    @property
    def fsdp_precision(self) -> str:
        """The base precision's name: FSDP2 gathers and reduces as that precision says (accel.fsdp.precision)."""
        return FSDP_BASE_NAMES.get(self.recipe.base_precision, self.recipe.base_precision)

    def configure_fsdp(self) -> None:
        """Default for an FP8 backend: refused, as its layers and state are not known to shard."""
        raise ValueError(
            f"mixed_precision='fp8' with FP8RecipeKwargs(backend={self.library!r}) cannot run under FSDP "
            "(fsdp_plugin / distributed_type: FSDP): accel does not shard this backend's FP8 layers and state. "
            "Use backend='ao' or 'native' under FSDP, or this backend under DDP (leave out the fsdp_plugin)."
        )

    def configure_tensor_parallel(self) -> None:
        """Refused for every FP8 backend: their FP8 layers replace the nn.Linear layers that tensor parallelism
        splits, and accel does not split FP8 layers or their scales."""
        raise ValueError(
            f"mixed_precision='fp8' with FP8RecipeKwargs(backend={self.library!r}) cannot run with tensor parallelism "
            "(tp_size > 1): its FP8 layers replace the nn.Linear layers that tensor parallelism splits, and accel does "
            "not split FP8 layers or their scaling state. Use mixed_precision='bf16' (or 'fp16', 'no') with tensor "
            "parallelism, or FP8 with tp_size=1 (DDP or FSDP2)."
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name='fp8', backend={self.library!r}, base_precision="
            f"{self.recipe.base_precision!r}, param_dtype={self.param_dtype})"
        )

    @classmethod
    def availability(cls, device: torch.device) -> str | None:
        """Why this backend cannot run on `device`, or None when it can."""
        return None

    def _check_recipe(self) -> None:
        """Raise for a recipe field set explicitly that this backend cannot honour."""
        if self.scaling not in self.scalings:
            others = [repr(name) for name, cls in FP8_BACKENDS.items() if self.scaling in cls.scalings]
            raise ValueError(
                f"FP8RecipeKwargs(scaling={self.scaling!r}) cannot run on the {self.library!r} FP8 backend; "
                f"it runs scaling {', '.join(map(repr, self.scalings))}. Backends that run {self.scaling!r}: "
                f"{', '.join(others) or 'none'} (docs/fp8-backends.md, 'Where each recipe runs')."
            )
        for field, reason in self.refusals.items():
            if field in self.recipe.explicit_fields and getattr(self.recipe, field) != getattr(FP8RecipeKwargs(), field):
                raise ValueError(
                    f"FP8RecipeKwargs({field}={getattr(self.recipe, field)!r}) cannot run on the {self.library!r} FP8 "
                    f"backend: {reason}"
                )
        unhonoured = sorted(self.recipe.explicit_fields - self.honoured_fields - EVERY_BACKEND_HONOURS)
        if unhonoured:
            raise ValueError(
                f"FP8RecipeKwargs sets {', '.join(unhonoured)}, which the {self.library!r} FP8 backend cannot honour "
                f"(it honours {', '.join(sorted(self.honoured_fields))}). Remove "
                f"{'it' if len(unhonoured) == 1 else 'them'}, or choose a backend that honours "
                f"{'it' if len(unhonoured) == 1 else 'them'} (docs/fp8-backends.md)."
            )

    # ------------------------------------------------------------------ the base precision
    def convert_base(self, module: nn.Module) -> nn.Module:
        """`module` as the base precision keeps it (cast to 16 bits for a true base), before FP8 conversion."""
        return self.base.convert_module(module)

    def check_masters(self, modules: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer]) -> None:
        self.base.check_masters(modules, optimizers)

    def keep_masters(self, module: nn.Module) -> None:
        """The base precision's masters (float32 for a bf16/fp16 base), before the FP8 conversion."""
        self.base.keep_masters(module)

    @property
    def upcast_parameters(self) -> tuple[UpcastParameter, ...]:
        return self.base.upcast_parameters

    def autocast(self, handler: AutocastKwargs | None = None) -> AbstractContextManager[Any]:
        return self.base.autocast(handler)

    def init_context(self) -> AbstractContextManager[Any]:
        return self.base.init_context()

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self.base.check_optimizer(optimizer)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.base.backward(loss, **kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.base.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        return self.base.optimizer_step(optimizer, closure)

    def stats(self) -> dict[str, float]:
        return self.base.stats()

    def state_dict(self) -> dict[str, Any]:
        return self.base_state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_base_state_dict(state)
        super().load_state_dict({k: v for k, v in state.items() if k != "loss_scaler"})

    def base_state_dict(self) -> dict[str, Any]:
        """The base precision's state: the loss scaler's under "loss_scaler" (fp16), else nothing."""
        return {} if self.loss_scaler is None else {"loss_scaler": self.loss_scaler.state_dict()}

    def load_base_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `base_state_dict()` out of a backend's state (a checkpoint without it keeps the fresh scaler)."""
        if self.loss_scaler is not None and "loss_scaler" in state:
            self.loss_scaler.load_state_dict(state["loss_scaler"])

    # ------------------------------------------------------------------ FP8
    def fp8_stats(self) -> dict[str, dict[str, float]]:
        """Per layer: amax, scale and over/underflow counts of the last step. Default: none."""
        return {}

    def report_health(self, sink: HealthSink) -> None:
        """Every `health_interval` optimizer steps, send `health()`'s readings to `sink` (health.py).

        Off (0, the default) nothing is installed. On, this backend's `optimizer_step` is wrapped, on
        this instance, by the monitor that counts steps and reports.
        """
        interval = self.recipe.health_interval
        if interval:
            monitor = HealthMonitor(interval, sink, self.health, self.count_health, self.library, self.health_gaps)
            self.optimizer_step = monitor.wrap(self.optimizer_step)  # type: ignore[method-assign]  # on purpose, when on
            self.convert_module = self._keeping_models(self.convert_module)  # type: ignore[method-assign,assignment]  # as above

    def _keeping_models(self, convert: Callable[[nn.Module], nn.Module]) -> Callable[[nn.Module], nn.Module]:
        """`convert`, also keeping each converted model in `health_models` (for backends that read them)."""

        def convert_and_keep(module: nn.Module) -> nn.Module:
            converted = convert(module)
            self.health_models.append(converted)
            return converted

        return convert_and_keep

    def health(self) -> Readings:
        """Per FP8 tensor ('<layer>.<role>'), the readings of the step that just ended: any of 'amax',
        'scale', 'saturated', 'underflowed' (fractions in [0, 1]) the backend exposes. Read at report
        steps only (it may sync the device). Default: none.

        >>> accelerator.precision.health()["fc1.input"]  # doctest: +SKIP
        {'amax': 3.1, 'scale': 144.5, 'saturated': 0.0, 'underflowed': 0.002}
        """
        return {}

    def count_health(self, on: bool) -> None:
        """Count saturated and underflowed values during the coming step (`on`), or stop. Called
        before a report step and after it. Default: the backend counts nothing."""

    def _record_conversion(self, report: ConversionReport) -> None:
        """Keep the report, log its summary once, and refuse a model with nothing to convert."""
        if not report.num_fp8:
            small = " (all eligible layers are too small to gain: set FP8RecipeKwargs(small_layer_dim=0) to convert them)"
            raise ValueError(
                "mixed_precision='fp8' found no linear layer (nn.Linear, or transformers' Conv1D on backend='native') "
                f"it can run in FP8, so nothing would run in FP8{small if report.skipped_small else ''}.\n"
                + report.details()
            )
        if self.fsdp_mode:
            report = dataclasses.replace(report, sharding=self.fsdp_mode)
        self.conversion_report = report
        logger.info(report.summary())


FP8_BACKENDS: dict[str, type[FP8Backend]] = {}
"""FP8 backend name -> class; each backend module registers itself with `register_fp8_backend`."""


def register_fp8_backend(cls: type[FP8Backend]) -> type[FP8Backend]:
    """Class decorator: make `cls` selectable as FP8RecipeKwargs(backend=cls.library)."""
    FP8_BACKENDS[cls.library] = cls
    return cls
