"""The `msamp` FP8 backend: Microsoft MS-AMP's `msamp.initialize(model, optimizer, opt_level)`.

MS-AMP converts a model and its Adam/AdamW optimizer together: nn.Linear becomes FP8Linear
(FP16 weights with a scale, FP8 weight gradients) and the optimizer becomes LBAdam/LBAdamW
(at O2 with an FP8 first and FP16 second moment). accel prepares the model and the optimizer
in one `prepare` call or in several, in either order, and calls `msamp.initialize` as soon as
it has both. The loss is scaled by a torch GradScaler, as MS-AMP's own examples do. MS-AMP is
imported only when this backend is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch
from torch import nn

from accel._warnings import warn_once
from accel.backends.base import Forward, PrecisionBackend, WrappedOptimizer
from accel.backends.capability import cuda_fp8_reason
from accel.backends.conversion import ConversionReport, plan_conversion
from accel.backends.fp8.base import FP8Backend, register_fp8_backend
from accel.backends.fp8.base_precision import FP8Forward
from accel.backends.fp8.support import check_fixed_fields, cuda_library_reason, library_version, module_present, too_old_reason
from accel.backends.loss_scaler import LossScaler
from accel.kwargs_handlers import FP8RecipeKwargs, GradScalerKwargs, Handlers

MIN_MSAMP_VERSION = (0, 3)
MSAMP_DEFAULT_LEVEL = "O1"
"""What msamp.initialize runs when the recipe leaves optimization_level out (its own default)."""
UNMAINTAINED = (
    "MS-AMP is unmaintained upstream (no commits since December 2025; Accelerate marks it deprecated). "
    "Instead: backend='native' runs MS-AMP's recipe (optimization_level O1 or O2) on any device without building "
    "MS-AMP; 'te' or 'ao' run FP8 with NVIDIA's or PyTorch's maintained kernels"
)
"""Said by `accel env`, the wizard and docs/fp8-backends.md wherever msamp is offered (the backend itself stays)."""
MSAMP_CONV1D_REASON = (
    "transformers' Conv1D (a Linear with its weight stored transposed, as in GPT-2) is not converted: MS-AMP's "
    "LinearReplacer replaces nn.Linear only; backend='native' converts Conv1D"
)
INSTALL_MSAMP = (
    "it is not on PyPI: build it from source on a CUDA machine with git clone --recursive "
    "https://github.com/Azure/MS-AMP && cd MS-AMP && pip install . && make postinstall, or use the "
    "ghcr.io/azure/msamp container, as docs/fp8-backends.md says"
)
FIXED_FIELDS: dict[str, object] = {
    "fp8_format": "HYBRID",
    "margin": 0,
    "amax_compute_algo": "max",
    "use_autocast_during_eval": True,
}
"""What MS-AMP always runs: E4M3 forward and E5M2 output gradients, no margin, the max over its
amax window, and FP8 in eval mode too (its FP8Linear has no high-precision mode)."""
TRUE_BASES = ("bf16-true", "16-true")
"""Base precisions with 16-bit weights, which MS-AMP does not train."""
ADAM_TYPES: tuple[type[torch.optim.Optimizer], ...] = (torch.optim.Adam, torch.optim.AdamW)
_ANY_DEVICE = (
    "backend='native' runs FP8 on any device, with any optimizer at optimization_level='O1' "
    "(O2 needs Adam/AdamW)"
)


class _Pairing:
    """The one model and optimizer MS-AMP converts, and whether it has converted them yet."""

    __slots__ = ("model", "wrapped", "ready")

    def __init__(self) -> None:
        self.model: nn.Module | None = None
        self.wrapped: WrappedOptimizer | None = None
        self.ready = False


class MSAMPForward(FP8Forward):
    """The model's forward in the base precision, refused until MS-AMP has converted the model with its optimizer."""

    __slots__ = ("_pairing",)

    def __init__(self, forward: Forward, base: PrecisionBackend, pairing: _Pairing) -> None:
        super().__init__(forward, base)
        self._pairing = pairing

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._pairing.ready:
            raise RuntimeError(
                "backend='msamp': this model does not run in FP8 yet, because MS-AMP converts a model together "
                "with its torch.optim.Adam/AdamW optimizer. Pass the optimizer to accelerator.prepare(...) "
                f"before the first forward ({_ANY_DEVICE})."
            )
        return self._run(*args, **kwargs)


@register_fp8_backend
class MSAMPFP8(FP8Backend):
    """FP8 through MS-AMP (`msamp.initialize`), with loss scaling by a torch GradScaler."""

    library = "msamp"
    scalings = ("delayed",)
    honoured_fields = frozenset({"optimization_level", "exclude_modules", "fp8_params", *FIXED_FIELDS})

    refusals = {
        "health_interval": (
            "MS-AMP exposes no per-layer FP8 statistics accel reads, and it is unmaintained upstream. Use "
            "backend='native' (every reading) or 'te' / 'ao' (amax and scale) for FP8 health."
        ),
        "fp8_params": (
            "MS-AMP stores weights in FP8 only at its O3 level, which runs through DeepSpeed ZeRO, not "
            "msamp.initialize (whose O1/O2 keep FP16 weights with a scale). Use backend='native' or 'te'."
        ),
    }
    handler_types = (FP8RecipeKwargs, GradScalerKwargs)

    @property
    def level(self) -> str:
        """The level msamp.initialize runs: the recipe's, else MS-AMP's own default, O1."""
        return self.recipe.optimization_level or MSAMP_DEFAULT_LEVEL

    def _level_name(self) -> str:
        return f", {self.level}"

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        super().__init__(device, handlers)
        # MS-AMP always scales the loss (its examples do); an fp16 base brings the same scaler.
        self.scaler = self.loss_scaler or LossScaler(device, handlers.get(GradScalerKwargs))
        self._pairing = _Pairing()
        self._scaled: _TensorParams | None = None
        """What torch's GradScaler unscales and steps, once msamp.initialize ran."""
        self._scaling_params: list[Any] = []
        """MS-AMP's ScalingParameters (FP8Linear weights), which are not torch.Tensors."""
        if "use_autocast_during_eval" not in self.recipe.explicit_fields:
            warn_once(
                "backend='msamp' runs FP8 in eval mode too: MS-AMP's FP8Linear has no high-precision mode "
                "(FP8RecipeKwargs.use_autocast_during_eval=False cannot be honoured; set it to True to say so)."
            )
        warn_once(f"backend='msamp': {UNMAINTAINED}.", FutureWarning)  # Accelerate warns too (FutureWarning)

    @classmethod
    def availability(cls, device: torch.device) -> str | None:
        """None when MS-AMP can run on `device`; else why not (GPU, library, version)."""
        reason = cuda_library_reason("MS-AMP", _library_reason(), cuda_fp8_reason(device), _import_msamp)
        if reason is not None:
            return reason
        return too_old_reason(
            "MS-AMP", library_version(_import_msamp(), ("msamp", "ms-amp")), MIN_MSAMP_VERSION, INSTALL_MSAMP
        )

    def _check_recipe(self) -> None:
        check_fixed_fields(self.recipe, FIXED_FIELDS, self.library, "MS-AMP has no setting for it")
        if self.recipe.base_precision in TRUE_BASES:
            raise ValueError(
                f"FP8RecipeKwargs(base_precision={self.recipe.base_precision!r}) cannot run on the 'msamp' FP8 "
                "backend: MS-AMP trains an fp32 model (its FP8Linear keeps its own FP16 weights with a scale, "
                "and LBAdam/LBAdamW step the other parameters without a master copy), under torch.autocast as in "
                "its examples. Use base_precision 'bf16', 'fp16' or 'fp32', or backend='te' / 'native' for "
                "16-bit weights."
            )
        super()._check_recipe()

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        super().check_optimizer(optimizer)
        _check_adam(optimizer)
        if self._pairing.ready:
            raise NotImplementedError(
                "backend='msamp' runs one optimizer: msamp.initialize has already converted the model with its "
                "optimizer (it runs once per process). Use one Adam/AdamW with parameter groups, or backend='native'."
            )

    def convert_module(self, module: nn.Module) -> nn.Module:
        if self._pairing.model is not None and self._pairing.model is not module:
            raise NotImplementedError(
                "backend='msamp' runs one model: MS-AMP keeps its FP8 scaling state for one model per process "
                "(msamp.initialize is called once). Put the models in one nn.Module, or use backend='native'."
            )
        _check_one_process()
        module = self.convert_base(module)
        report = plan_conversion(
            module, exclude_modules=self.recipe.exclude_modules, is_converted=_is_fp8_linear,
            conv1d_refusal=MSAMP_CONV1D_REASON, small_layers=self.small_layers,
        )
        self._record_conversion(report)
        self._pairing.model = module
        return module

    def wrap_forward(self, forward: Forward) -> Forward:
        return MSAMPForward(forward, self.base, self._pairing)

    def after_prepare(self, models: Sequence[nn.Module], optimizers: Sequence[WrappedOptimizer]) -> None:
        """Once the model and its optimizer are both prepared: msamp.initialize, then swap the optimizer."""
        pairing = self._pairing
        if pairing.ready or pairing.model is None or not optimizers:
            return
        if len(optimizers) > 1:
            raise NotImplementedError(
                f"backend='msamp' runs one optimizer, {len(optimizers)} were prepared: msamp.initialize converts one "
                "model and one optimizer, once per process. Use one Adam/AdamW with parameter groups."
            )
        pairing.wrapped = optimizers[0]
        old = pairing.wrapped.optimizer
        _check_owned(pairing.model, old)
        assert self.conversion_report is not None
        with _current_cuda_device(self.device):  # MS-AMP moves its FP8Linear layers with .cuda()
            pairing.wrapped.optimizer = _initialize(
                _import_msamp(), pairing.model, old, self.level, self.conversion_report
            )
        self._scaled = _TensorParams(pairing.wrapped.optimizer)
        self._scaling_params = [p for p in pairing.model.parameters() if not isinstance(p, torch.Tensor)]
        # The new optimizer shares the old one's param_group dicts, so an LR scheduler built on the old one
        # still sets the learning rate that steps. Mark the old one as stepped, as torch's scheduler hook
        # would, so that the scheduler does not warn that it is stepped before its optimizer.
        old._opt_called = True  # type: ignore[attr-defined]  # torch's scheduler hook sets this private flag
        pairing.ready = True

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.scaler.backward(loss, **kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale as MS-AMP does: torch's GradScaler for the torch.Tensor parameters (its check refuses
        MS-AMP's ScalingParameters, which are not Tensors), and MS-AMP's replacement of
        torch._amp_foreach_non_finite_check_and_unscale_ for theirs (it unscales their scale_inv and
        checks their amax), into the same found-inf flags that decide the step."""
        scaled = self._scaled
        if scaled is None or not self.scaler.scaler.is_enabled():
            self.scaler.unscale_(optimizer)
            return
        self.scaler.unscale_(scaled)  # type: ignore[arg-type]  # _TensorParams stands in for the optimizer
        grads = [p.grad for p in self._scaling_params if p.grad is not None]
        if grads:
            device = grads[0].device
            found = self.scaler.scaler._found_inf_per_device(scaled)  # type: ignore[arg-type]  # as above
            found_inf = found.setdefault(device, torch.zeros((), dtype=torch.float32, device=device))
            scale = self.scaler.scaler._scale
            assert scale is not None  # GradScaler.unscale_ above asserted it is set
            inv_scale = scale.double().reciprocal().float().to(device)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        scaled.unscaled = True

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        scaled = self._scaled
        if scaled is None or not self.scaler.scaler.is_enabled():
            return self.scaler.step(optimizer, closure)
        if not scaled.unscaled:
            self.unscale_(optimizer)
        try:
            return self.scaler.step(scaled, closure)  # type: ignore[arg-type]  # _TensorParams stands in for the optimizer
        finally:
            scaled.unscaled = False

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """MS-AMP's own clip_grad_norm_, which handles its ScalingParameters' gradients."""
        return _import_msamp().clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Weights in high precision: MS-AMP's scaled FP16 weights (ScalingTensor) are dequantized."""
        return {name: v if isinstance(v, torch.Tensor) else v.float() for name, v in model.state_dict().items()}

    def stats(self) -> dict[str, float]:
        return self.scaler.stats()

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scaler.load_state_dict(state)


class _TensorParams:
    """MS-AMP's optimizer as torch's GradScaler may see it: the torch.Tensor parameters only
    (`_unscale_grads_` asserts that every parameter is a Tensor); `step` steps the whole optimizer."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.param_groups = [
            {"params": [p for p in group["params"] if isinstance(p, torch.Tensor)]} for group in optimizer.param_groups
        ]
        self.unscaled = False

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return self.optimizer.step(closure) if closure is not None else self.optimizer.step()


def _current_cuda_device(device: torch.device) -> Any:
    """`device` as torch.cuda's current device inside the block (where `.cuda()` puts a module), on CUDA."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _initialize(
    msamp: ModuleType, model: nn.Module, optimizer: torch.optim.Optimizer, level: str, report: ConversionReport
) -> torch.optim.Optimizer:
    """Run msamp.initialize on `model` in place, keeping high precision what `report` skipped."""
    modules = dict(model.named_modules())
    kept = [modules[d.name] for d in report.skipped if isinstance(modules.get(d.name), nn.Linear)]
    for linear in kept:
        linear.use_fp32_linear = True  # MS-AMP's LinearReplacer leaves such Linears alone
    # torch >= 2.6 adds `decoupled_weight_decay` to Adam(W)'s defaults, which MS-AMP passes on to
    # LBAdam(W), whose constructors do not take it; for AdamW it is always True, for Adam checked False.
    optimizer.defaults.pop("decoupled_weight_decay", None)
    try:
        converted, new_optimizer = msamp.initialize(model, optimizer, opt_level=level)
    finally:
        for linear in kept:
            del linear.use_fp32_linear
    if converted is not model:
        raise RuntimeError("msamp.initialize returned another model object than it was given; accel cannot use it.")
    if isinstance(optimizer, torch.optim.AdamW) and getattr(new_optimizer, "use_adam", False):
        # Since torch 2.6 AdamW subclasses Adam, and msamp.initialize tests for Adam first: it builds
        # LBAdam, which is LBAdamW with L2 weight decay (use_adam=True). Restore decoupled decay.
        new_optimizer.use_adam = False
    return new_optimizer


def _check_one_process() -> None:
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized() and distributed.get_world_size() > 1:
        raise NotImplementedError(
            "backend='msamp' runs on one process in this version of accel: several processes need MS-AMP's own "
            "DistributedDataParallel and optimizer.all_reduce_grads(model), which accel does not wire. Use "
            "backend='te', 'ao' or 'native' with several processes."
        )


def _check_adam(optimizer: torch.optim.Optimizer) -> None:
    if type(optimizer) not in ADAM_TYPES:
        raise ValueError(
            f"backend='msamp' cannot train with {type(optimizer).__module__}.{type(optimizer).__qualname__}: "
            "MS-AMP accepts only torch.optim.Adam and torch.optim.AdamW (not subclasses), which it replaces by "
            f"its own LBAdam/LBAdamW. Use one of them, or {_ANY_DEVICE}."
        )
    defaults = optimizer.defaults
    if defaults.get("amsgrad"):
        raise ValueError("backend='msamp' cannot run amsgrad=True: MS-AMP's LBAdam/LBAdamW have no AMSGrad.")
    if type(optimizer) is torch.optim.Adam and defaults.get("decoupled_weight_decay"):
        raise ValueError(
            "backend='msamp' cannot run torch.optim.Adam(decoupled_weight_decay=True): MS-AMP's LBAdam has no "
            "such option. Use torch.optim.AdamW, which is the same algorithm."
        )


def _check_owned(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    owned = {id(p) for p in model.parameters()}
    foreign = sum(id(p) not in owned for group in optimizer.param_groups for p in group["params"])
    if foreign:
        raise ValueError(
            f"backend='msamp': {foreign} parameter(s) of the optimizer do not belong to the prepared model; MS-AMP "
            "maps the optimizer's parameters onto the converted model's, so it must be built from that model's "
            "parameters only."
        )


def _is_fp8_linear(module: nn.Module) -> bool:
    return type(module).__name__ == "FP8Linear" and type(module).__module__.startswith("msamp")


def _library_reason() -> str | None:
    return None if module_present("msamp") else f"MS-AMP is not installed ({INSTALL_MSAMP})"


def _import_msamp() -> ModuleType:
    import msamp

    return msamp
