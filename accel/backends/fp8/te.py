"""The `te` FP8 backend: NVIDIA TransformerEngine, on CUDA GPUs with FP8 (compute capability >= 8.9).

nn.Linear and nn.LayerNorm become te.Linear and te.LayerNorm (weights copied, optimizers
re-pointed at the new Parameters), and the model's forward runs under TE's autocast with a
recipe built from FP8RecipeKwargs: DelayedScaling (the default), Float8CurrentScaling,
MXFP8BlockScaling, Float8BlockScaling or NVFP4BlockScaling. TransformerEngine is imported only when this backend
is built, never by `import accel`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch
from torch import nn

from accel.backends.base import Forward, PrecisionBackend, WrappedOptimizer
from accel.backends.capability import cuda_fp8_reason
from accel.backends.conversion import ConversionReport
from accel.backends.fp8.base import FP8Backend, register_fp8_backend
from accel.backends.fp8.base_precision import FP8Forward
from accel.backends.fp8.health import Readings
from accel.backends.fp8.health_readers import te_readings
from accel.backends.fp8.support import (
    check_fixed_fields,
    cuda_library_reason,
    library_version,
    module_present,
    too_old_reason,
    version_tuple,
)
from accel.backends.fp8.te_api import TEAutocast
from accel.backends.fp8.te_convert import (
    ParameterMap,
    convert_layer_norms,
    convert_linears,
    layer_norm_summary,
    plan_linears,
)
from accel.backends.fp8.te_params import MasterWeights
from accel.backends.fp8.te_recipe import (
    DELAYED_ONLY,
    FIXED_FORMATS,
    REQUIREMENTS,
    build_recipe,
    recipe_support_reason,
)
from accel.kwargs_handlers import Handlers

logger = logging.getLogger("accel")

MIN_TE_VERSION = (2, 0)
MIN_TE_FSDP2_VERSION = (2, 10)
"""TransformerEngine trains its modules under torch's fully_shard (FSDP2) from 2.10 on (its PR #2245,
"FSDP2 Support for TE"; 1.14 had only a first FP8 all-gather of Float8Tensor weights)."""
INSTALL_TE = (
    "install it on a machine with CUDA and cuDNN: pip install --no-build-isolation "
    "'transformer_engine[pytorch]', as docs/fp8-backends.md says"
)


class TEForward(FP8Forward):
    """The model's forward under TE's autocast (FP8 in training, in eval mode when asked), in the base precision."""

    __slots__ = ("_autocast", "_fp8_in_eval")

    def __init__(self, forward: Forward, base: PrecisionBackend, autocast: TEAutocast, fp8_in_eval: bool) -> None:
        super().__init__(forward, base)
        self._autocast = autocast
        self._fp8_in_eval = fp8_in_eval

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._autocast(self.module.training or self._fp8_in_eval):
            return self._run(*args, **kwargs)


@register_fp8_backend
class TransformerEngineFP8(FP8Backend):
    """FP8 through NVIDIA TransformerEngine's modules and autocast."""

    library = "te"
    scalings = ("delayed", "current", "mxfp8", "block", "nvfp4")
    honoured_fields = frozenset(
        {"fp8_format", "margin", "amax_history_len", "amax_compute_algo", "use_autocast_during_eval", "exclude_modules",
         "fp8_params", "backward_override"}
    )

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        self.te = _import_te()
        from transformer_engine.common import recipe as recipe_module

        self.te_recipe = build_recipe(recipe_module, self.recipe, self.scaling)  # raises where this TE lacks it
        reason = recipe_support_reason(self.te, self.scaling, device)
        if reason is not None:
            raise ValueError(
                f"FP8RecipeKwargs(scaling={self.scaling!r}) cannot run on this GPU with 'te': {reason}. It needs "
                f"{REQUIREMENTS[self.scaling]}; choose another scaling (docs/fp8-backends.md lists where each runs)."
            )
        self.autocast_factory = TEAutocast(self.te, self.te_recipe, _process_group())
        self.layer_norm_report: ConversionReport | None = None
        self._params = ParameterMap()
        self.master_weights = MasterWeights(self.te, self.te_recipe) if self.recipe.fp8_params else None
        """fp8_params: the TE modules' FP8 weights and their masters, which the optimizer steps."""

    @classmethod
    def availability(cls, device: torch.device) -> str | None:
        """None when TE can run on `device`; else why not (GPU, library, version)."""
        reason = cuda_library_reason("TransformerEngine", _library_reason(), cuda_fp8_reason(device), _import_te)
        if reason is not None:
            return reason
        version = library_version(_root_module(_import_te()), ("transformer_engine", "transformer-engine"))
        return too_old_reason("TransformerEngine", version, MIN_TE_VERSION, INSTALL_TE)

    def _check_recipe(self) -> None:
        delayed_fields = sorted(self.recipe.explicit_fields & set(DELAYED_ONLY))
        if self.scaling != "delayed" and self.scaling in self.scalings and delayed_fields:
            raise ValueError(
                f"FP8RecipeKwargs sets {', '.join(delayed_fields)}, which only delayed scaling uses, but scaling is "
                f"{self.scaling!r}: TransformerEngine's {self.scaling} recipe has no amax history or margin. "
                "Remove them, or use scaling='delayed'."
            )
        if self.recipe.backward_override is not None and self.scaling == "delayed":
            raise ValueError(
                f"FP8RecipeKwargs(backward_override={self.recipe.backward_override!r}) cannot run with delayed scaling "
                "(the te backend's default): TransformerEngine's DelayedScaling takes only backward_override=None. "
                "Use scaling='current', 'block', 'mxfp8' or 'nvfp4', or leave backward_override out."
            )
        if self.scaling in FIXED_FORMATS:
            check_fixed_fields(self.recipe, {"fp8_format": FIXED_FORMATS[self.scaling]}, self.library,
                               f"TransformerEngine's {self.scaling} recipe keeps its block scales in E4M3")
        super()._check_recipe()

    def convert_module(self, module: nn.Module) -> nn.Module:
        module = self.convert_base(module)
        exclude = self.recipe.exclude_modules
        report = plan_linears(module, self.te, exclude, self.scaling, self.small_layers)
        self._record_conversion(report)  # raises, leaving the model as it was, when no Linear can run in FP8
        convert_linears(module, self.te, report, self._params, self.master_weights, self.device)
        norms = convert_layer_norms(module, self.te, exclude, self._params, self.device)
        self.layer_norm_report = norms
        logger.info(layer_norm_summary(norms))
        return module

    health_gaps = (
        "saturated and underflowed fractions (TransformerEngine counts neither); amax and scale under delayed "
        "scaling only (current, block and MXFP8 scaling keep no amax history)."
    )

    def health(self) -> Readings:
        """Per TE module, the amax (history window's largest) and scale of its input, weight and output
        gradient, from TE's delayed-scaling state (health_readers.py)."""
        return te_readings(self.health_models)

    def wrap_forward(self, forward: Forward) -> Forward:
        return TEForward(forward, self.base, self.autocast_factory, self.recipe.use_autocast_during_eval)

    def configure_fsdp(self) -> None:
        """Under FSDP2: TE 2.10 or newer shards its modules' high-precision weights; older TE, and accel's
        fp8_params (FP8 weights with master copies outside the module), are refused."""
        version = library_version(_root_module(self.te), ("transformer_engine", "transformer-engine"))
        if version is None or version_tuple(version) < MIN_TE_FSDP2_VERSION:
            wanted = ".".join(map(str, MIN_TE_FSDP2_VERSION))
            raise ValueError(
                f"FP8RecipeKwargs(backend='te') cannot run under FSDP with TransformerEngine {version or '(unknown)'}: "
                f"TE supports torch's fully_shard (FSDP2) from {wanted} on. Upgrade TransformerEngine to {wanted} or "
                "newer, use backend='ao' or 'native' under FSDP, or train under DDP (leave out the fsdp_plugin)."
            )
        if self.recipe.fp8_params:
            raise ValueError(
                "FP8RecipeKwargs(fp8_params=True) cannot run on backend='te' under FSDP in accel: accel keeps the "
                "FP8 weights' high-precision masters outside the TE modules, where fully_shard does not shard them. "
                "Leave fp8_params out under FSDP, or train under DDP (leave out the fsdp_plugin)."
            )
        self.fsdp_mode = f"TransformerEngine {version} modules sharded, high-precision weights all-gathered"

    def after_prepare(self, models: Sequence[nn.Module], optimizers: Sequence[WrappedOptimizer]) -> None:
        """Optimizers built on the model before `prepare` now step the TE modules' Parameters."""
        for wrapped in optimizers:
            self._params.remap(wrapped.optimizer)
            if self.master_weights is not None:
                self.master_weights.remap(wrapped.optimizer)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self.master_weights is not None:
            self.master_weights.move_gradients()
        super().unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        if self.master_weights is None:
            return super().optimizer_step(optimizer, closure)
        self.master_weights.move_gradients()
        stepped = super().optimizer_step(optimizer, closure)
        if stepped:
            self.master_weights.refresh()
        return stepped

    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Weights only, under the nn.Linear/nn.LayerNorm names (FP8 weights as their masters' values);
        TE's pickled `_extra_state` is left out."""
        state = {name: value for name, value in model.state_dict().items() if not name.endswith("_extra_state")}
        if self.master_weights is not None:
            state.update(self.master_weights.state_dict_values(model))
        return state


def _library_reason() -> str | None:
    if module_present("transformer_engine"):
        return None
    return f"TransformerEngine is not installed ({INSTALL_TE})"


def _import_te() -> ModuleType:
    import transformer_engine.pytorch as te

    return te


def _root_module(te: ModuleType) -> ModuleType | None:
    return sys.modules.get(te.__name__.split(".")[0])


def _process_group() -> Any:
    """The default process group when several processes train, else None (TE then reduces nothing)."""
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized() and distributed.get_world_size() > 1:
        return distributed.group.WORLD
    return None
