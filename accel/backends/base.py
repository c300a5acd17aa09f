"""PrecisionBackend: the hooks through which the Accelerator applies a precision.

Every hook has a do-nothing default, so the base class *is* fp32 training. A backend
overrides only what its precision changes. The Accelerator calls every hook
unconditionally; there are no precision `if`s outside `accel/backends/`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from accel.backends.masters import UpcastParameter
from accel.kwargs_handlers import AutocastKwargs, FP8RecipeKwargs, Handlers, KwargsHandler

Forward = Callable[..., Any]


class WrappedOptimizer(Protocol):
    """What a backend sees of a prepared optimizer: the user's optimizer inside it."""

    optimizer: torch.optim.Optimizer


class ForwardWrapper:
    """Base of the callables a backend installs as a prepared model's forward.

    A class rather than a closure so that a prepared model can still be pickled and
    deep-copied; `__wrapped__` is the forward it wraps, which `unwrap_model` restores.
    """

    __slots__ = ("__wrapped__",)

    def __init__(self, forward: Forward) -> None:
        self.__wrapped__ = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class PrecisionBackend:
    """Base class and fp32 behaviour. Subclasses set `name` and the dtypes and override hooks."""

    name: ClassVar[str] = "no"
    """The canonical precision name (what `accelerator.mixed_precision` reports)."""
    param_dtype: ClassVar[torch.dtype] = torch.float32
    """The dtype the model's weights are kept in."""
    compute_dtype: ClassVar[torch.dtype] = torch.float32
    """The dtype matrix products run in."""
    handler_types: ClassVar[tuple[type[KwargsHandler], ...]] = ()
    """Precision-specific handlers (GradScalerKwargs, FP8RecipeKwargs) this backend honours."""
    orphan_optimizer_is_error: ClassVar[bool] = False
    """True where an optimizer over parameters of no prepared model can never train it, so prepare
    raises instead of warning (the optimizer may otherwise legitimately train other tensors)."""
    native_amp: ClassVar[bool] = False
    """True where the forward runs under torch.autocast (Accelerate's `accelerator.native_amp`)."""

    def __init__(self, device: torch.device, handlers: Handlers) -> None:
        self.device = device
        self.handlers = handlers

    @property
    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """torch's GradScaler where this precision scales the loss (Accelerate's `accelerator.scaler`)."""
        loss_scaler = getattr(self, "loss_scaler", None)
        return None if loss_scaler is None else loss_scaler.scaler

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, param_dtype={self.param_dtype}, compute_dtype={self.compute_dtype})"

    def describe(self) -> str:
        """What runs, in a few words for a log line (say 'bf16' or 'fp8 (native, O1, ...)')."""
        return self.name

    @property
    def fp8_recipe_in_effect(self) -> tuple[str, FP8RecipeKwargs] | None:
        """Where FP8 runs: the FP8 backend that runs it ("te", "ao", "msamp", "native") and the recipe
        in effect (Accelerate's `accelerator.fp8_recipe_handler` reads it); None here."""
        return None

    @property
    def fsdp_precision(self) -> str:
        """The precision whose MixedPrecisionPolicy FSDP2 shards this one with (accel.fsdp.precision):
        its own name; an FP8 backend answers with its base precision."""
        return self.name

    def configure_fsdp(self) -> None:
        """Called once, at construction, when prepared models will be sharded with FSDP2 (fully_shard)
        instead of DDP: get ready for it, or raise ValueError naming what cannot run sharded and what to
        do. Default: nothing changes under FSDP."""

    def configure_tensor_parallel(self) -> None:
        """Called once, at construction, when prepared models will be split with tensor parallelism
        (torch.distributed.tensor.parallel on DTensor weights): get ready, or raise ValueError naming what
        cannot run split and what to do. Default: nothing changes under tensor parallelism."""

    def convert_module(self, module: nn.Module) -> nn.Module:
        """Return the model converted for this precision (cast, layers swapped). Default: as is."""
        return module

    def check_masters(self, modules: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Raise ValueError, before prepare changes anything, when `keep_masters` on `modules` would change
        the dtype of parameters one of `optimizers` already holds state for. Default: nothing changes."""

    def keep_masters(self, module: nn.Module) -> None:
        """Give the trainable parameters of a model that will train the dtype this precision steps, in
        place (the same Parameters), before `convert_module`. Mixed precision makes 16-bit ones float32
        masters (accel.backends.masters). Default: the weights stay as given."""

    @property
    def upcast_parameters(self) -> tuple[UpcastParameter, ...]:
        """The parameters `keep_masters` made float32 so far (name, dtype they had, size); empty here.

        >>> from accel import Accelerator
        >>> Accelerator(mixed_precision="no").precision.upcast_parameters
        ()
        """
        return ()

    def wrap_forward(self, forward: Forward) -> Forward:
        """Return the forward to install on a prepared model. Default: `forward` itself (no cost)."""
        return forward

    def autocast(self, handler: AutocastKwargs | None = None) -> AbstractContextManager[Any]:
        """The context for code outside the model (`accelerator.autocast()`). Default: none."""
        return contextlib.nullcontext()

    def init_context(self) -> AbstractContextManager[Any]:
        """The context in which `accelerator.init_module()` builds a model. Default: none."""
        return contextlib.nullcontext()

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Raise if `optimizer` cannot work in this precision (called by prepare). Default: accept."""

    def after_prepare(self, models: Sequence[nn.Module], optimizers: Sequence[WrappedOptimizer]) -> None:
        """Called at the end of every `prepare` call with everything prepared so far.

        For backends that need a model and its optimizer together (MS-AMP, FP8 optimizer
        states): they may replace `wrapped.optimizer` of an entry. Default: nothing.
        """

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Run the backward pass for `loss`."""
        loss.backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring `optimizer`'s gradients to their true scale (before clipping). Default: nothing."""

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Clip the (unscaled) gradients' total norm in place and return it. Default: torch's own;
        MS-AMP's parameters need MS-AMP's."""
        return nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Drop the gradients of `optimizer`'s parameters that this backend holds outside `param.grad`
        (after torch's own zero_grad). Default: it holds none."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        """Step `optimizer`; return False when the step was skipped (inf/NaN gradients)."""
        optimizer.step(closure) if closure is not None else optimizer.step()
        return True

    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The model's weights under their original names and in high precision, for saving."""
        return model.state_dict()

    def stats(self) -> dict[str, float]:
        """Numbers worth logging (loss scale, skipped steps, ...). Default: none."""
        return {}

    def held_tensors(self) -> dict[str, list[torch.Tensor]]:
        """Tensors this precision holds for the parameters outside `param.data` and `param.grad`, by kind
        ("parameters", "gradients"): what accel.estimate.measure counts besides the model and the
        optimizers. Default: none."""
        return {}

    def report_health(self, sink: Callable[[dict[str, float], int, str], None]) -> None:
        """Called once, at construction (main process): send this precision's health readings to
        `sink(values, step, summary)` as its recipe asks (FP8RecipeKwargs.health_interval). Default:
        this precision has none to report, and nothing is installed."""

    def state_dict(self) -> dict[str, Any]:
        """The precision's own state (loss scaler, FP8 scaling) for a checkpoint. Default: none."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        if state:
            raise ValueError(f"precision {self.name!r} keeps no state, but got state with keys {sorted(state)}.")

    def teardown(self) -> None:
        """Undo process-wide changes the backend made. Default: nothing."""
