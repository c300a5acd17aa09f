"""Accelerator: prepares a training script's objects and runs them in the asked precision."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader

from accel._validation import check_bool, check_int
from accel.accelerator import checkpointing, distributed, prepare_checks
from accel.accelerator import model as model_utils
from accel.accelerator.data import PreparedDataLoader
from accel.accelerator.gradient_state import GradientState
from accel.accelerator.io import save_weights
from accel.accelerator.optimizer import AcceleratedOptimizer
from accel.accelerator.processes import ProcessMixin
from accel.accelerator.tracking import TrackingMixin
from accel.accelerator.scheduler import AcceleratedScheduler
from accel.accelerator.state import ProcessState
from accel.backends.base import PrecisionBackend
from accel.backends.names import resolve_precision
from accel.backends.registry import create_backend
from accel.environment import check_environment
from accel.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    Handlers,
    InitProcessGroupKwargs,
    KwargsHandler,
    collect_handlers,
)
from accel.tracking.selection import LogWith
from accel.settings import GRADIENT_ACCUMULATION_STEPS, MIXED_PRECISION, USE_CPU, Setting, fp8_recipe_from_env


class Accelerator(TrackingMixin, ProcessMixin):
    """Prepares a model, optimizer, dataloader and scheduler to train in one precision.

    Accelerate's names and meanings. An argument left as None is read from its `ACCEL_*`
    environment variable (set by `accel launch`), else takes its default. Bad values raise
    here, at construction, never later in the training loop.
    """

    def __init__(
        self,
        *,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool | None = None,
        kwarg_handlers: Sequence[KwargsHandler] | None = None,
        kwargs_handlers: Sequence[KwargsHandler] | None = None,
        device_placement: bool = True,
        step_scheduler_with_optimizer: bool = True,
        project_dir: str | Path | None = None,
        project_config: checkpointing.ProjectConfiguration | None = None,
        log_with: LogWith | Sequence[LogWith] | None = None,
    ) -> None:
        check_environment()
        self.handlers = _with_environment_recipe(collect_handlers(kwarg_handlers, kwargs_handlers))
        precision = _setting(MIXED_PRECISION, mixed_precision, lambda arg, v: resolve_precision(v, arg))
        steps = _setting(GRADIENT_ACCUMULATION_STEPS, gradient_accumulation_steps, _positive_int)
        use_cpu = _setting(USE_CPU, cpu, check_bool)
        self.state = ProcessState.from_environment(cpu=use_cpu, group=self.handlers.get(InitProcessGroupKwargs))
        self.precision: PrecisionBackend = create_backend(precision, self.state.device, self.handlers)
        self.gradient_state = GradientState(steps)
        self.device_placement = check_bool("device_placement", device_placement)
        self.step_scheduler_with_optimizer = check_bool("step_scheduler_with_optimizer", step_scheduler_with_optimizer)
        self.project_configuration = checkpointing.resolve_project_configuration(project_config, project_dir)
        self.project_dir = self.project_configuration.project_dir
        self._setup_tracking(log_with)
        self._models: list[nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[PreparedDataLoader] = []
        self._orphan_optimizers_warned: set[int] = set()
        self._checkpointed_objects: list[Any] = []
        self._check_same_setup_on_every_process()

    # ----------------------------------------------------------------- properties
    @property
    def device(self) -> torch.device:
        """The device this process trains on."""
        return self.state.device

    @property
    def save_iteration(self) -> int:
        """The number the next save_state() gets (checkpoint_<n>); load_state() continues it."""
        return self.project_configuration.iteration

    @save_iteration.setter
    def save_iteration(self, value: int) -> None:
        self.project_configuration.iteration = value

    @property
    def mixed_precision(self) -> str:
        """The canonical name of the precision that runs ('no', 'fp16', 'bf16', 'fp8', '16-true', ...)."""
        return self.precision.name

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.num_steps = _positive_int("gradient_accumulation_steps", steps)

    @property
    def sync_gradients(self) -> bool:
        """True on a micro-batch that ends with an optimizer step."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state.sync_gradients = value

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last step of any prepared optimizer was skipped (inf/NaN gradients)."""
        return any(optimizer.step_was_skipped for optimizer in self._optimizers)

    @property
    def conversion_report(self) -> Any:
        """For FP8: every nn.Linear, converted or skipped and why (None for other precisions)."""
        return getattr(self.precision, "conversion_report", None)

    @property
    def step_stats(self) -> dict[str, float]:
        """Numbers worth logging each step: for fp16 the loss scale and the count of skipped steps."""
        return self.precision.stats()

    # ----------------------------------------------------------------- prepare
    def prepare(self, *objects: Any) -> Any:
        """Prepare models, optimizers, schedulers and dataloaders, given in any order.

        Returns the prepared objects in the order given (one object: that object itself);
        objects of other types pass through unchanged.
        """
        result = list(objects)
        for accepts, prepare in self._preparers():
            for index, obj in enumerate(result):
                if accepts(obj):
                    result[index] = prepare(obj)
        self.precision.after_prepare(self._models, self._optimizers)
        prepare_checks.check_orphan_optimizers(
            self._models, self._optimizers, self.precision, self._orphan_optimizers_warned
        )
        return result[0] if len(result) == 1 else tuple(result)

    def _preparers(self) -> list[tuple[Callable[[Any], bool], Callable[[Any], Any]]]:
        """(which objects, how to prepare them), in the order in which they must be prepared."""
        return [
            (lambda o: isinstance(o, nn.Module), self.prepare_model),
            (lambda o: isinstance(o, torch.optim.Optimizer), self.prepare_optimizer),
            (lambda o: isinstance(o, (LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)), self.prepare_scheduler),
            (lambda o: isinstance(o, DataLoader), self.prepare_data_loader),
        ]

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """Move `model` to the device and convert it for the precision."""
        if any(model is prepared for prepared in self._models):
            return model
        model = model_utils.prepare_model(model, self.precision, self.device, self.device_placement, self.state)
        ddp_options = self.handlers.get(DistributedDataParallelKwargs)
        model = model_utils.wrap_for_processes(model, self.state, ddp_options)
        self._models.append(model)
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> AcceleratedOptimizer:
        """Wrap `optimizer` so that it steps through the precision and honours accumulation.

        The same optimizer prepared twice (in one call or two) gets the same wrapper.
        """
        if isinstance(optimizer, AcceleratedOptimizer):
            return optimizer
        existing = prepare_checks.existing_wrapper(self._optimizers, optimizer)
        if existing is not None:
            return existing
        self.precision.check_optimizer(optimizer)
        wrapped = AcceleratedOptimizer(optimizer, self.precision, self.gradient_state)
        self._optimizers.append(wrapped)
        return wrapped

    def prepare_scheduler(self, scheduler: LRScheduler) -> AcceleratedScheduler:
        """Wrap `scheduler` so that it advances once per optimizer step that really happened."""
        owner = scheduler.optimizer
        optimizers = [o for o in self._optimizers if owner in (o, o.optimizer, o.original)]
        wrapped = AcceleratedScheduler(scheduler, optimizers, self.gradient_state, self.step_scheduler_with_optimizer)
        self._schedulers.append(wrapped)
        return wrapped

    def prepare_data_loader(self, loader: DataLoader[Any]) -> PreparedDataLoader:
        """Wrap `loader` so that its batches land on the device (and each process gets its own part)."""
        wrapped = PreparedDataLoader(loader, self.device, self.gradient_state, self.device_placement, self.state)
        self._dataloaders.append(wrapped)
        return wrapped

    # ----------------------------------------------------------------- training step
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate `loss` (divided by the accumulation steps, scaled for fp16)."""
        if not self._models:
            raise RuntimeError(
                "backward() was called before prepare(): pass your model (and optimizer) to "
                "accelerator.prepare(...) first, so that the precision can be applied."
            )
        steps = self.gradient_state.num_steps
        self.precision.backward(loss / steps if steps > 1 else loss, **kwargs)

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> AbstractContextManager[Any]:
        """The precision's autocast, for code outside the prepared model (a loss, say)."""
        return self.precision.autocast(autocast_handler)

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """One micro-batch: decides `sync_gradients` and skips DDP's all-reduce when not syncing."""
        if self.gradient_state.advance():
            yield
            return
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(self.no_sync(model))
            yield

    def no_sync(self, model: nn.Module) -> AbstractContextManager[Any]:
        """Skip DDP's gradient all-reduce inside the block (nothing to skip in one process)."""
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    def unscale_gradients(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Unscale the gradients of `optimizer` (default: every prepared one), once per step."""
        for wrapped in self._optimizers:
            if optimizer is None or optimizer is wrapped or optimizer is wrapped.optimizer:
                wrapped.unscale_gradients()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor | None:
        """Clip the gradients' total norm (after unscaling); returns that norm.

        On a micro-batch that does not sync (inside gradient accumulation) the gradients are
        partial sums: nothing is clipped and None is returned.
        """
        if not self.gradient_state.sync_gradients:
            return None
        self.unscale_gradients()
        return self.precision.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor] | torch.Tensor, clip_value: float) -> None:
        """Clip each gradient to [-clip_value, clip_value] (after unscaling), on sync micro-batches."""
        if not self.gradient_state.sync_gradients:
            return
        self.unscale_gradients()
        nn.utils.clip_grad_value_(parameters, clip_value)

    # ----------------------------------------------------------------- models and files
    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> nn.Module:
        """The user's model without DDP (and, if asked, without the precision's forward wrapper)."""
        return model_utils.unwrap_model(
            model, keep_fp32_wrapper=keep_fp32_wrapper, keep_torch_compile=keep_torch_compile
        )

    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """The model's weights, under their original names and in high precision."""
        if unwrap:
            model = self.unwrap_model(model, keep_torch_compile=False)
        return self.precision.model_state_dict(model)

    def save_model(self, model: nn.Module, save_directory: str | Path, safe_serialization: bool = True) -> Path | None:
        """Write the model's weights to `save_directory/model.safetensors` (main process only)."""
        if not safe_serialization:
            raise ValueError(
                "save_model(safe_serialization=False): accel writes safetensors only, never pickles; drop the argument."
            )
        state_dict = self.get_state_dict(model)
        return save_weights(state_dict, save_directory) if self.is_main_process else None

    def init_module(self) -> AbstractContextManager[Any]:
        """A context in which a model is built on the device and directly in the precision's dtype."""
        stack = contextlib.ExitStack()
        if self.device_placement and self.device.type != "cpu":
            stack.enter_context(self.device)
        stack.enter_context(self.precision.init_context())
        return stack

    # ----------------------------------------------------------------- checkpoints
    def save_state(self, output_dir: str | Path | None = None) -> Path:
        """Write a checkpoint of everything needed to resume exactly; returns its folder.

        Without `output_dir`, writes `project_dir/checkpoints/checkpoint_<n>` (see docs/checkpoints.md).
        """
        return checkpointing.save_state(self, output_dir)

    def load_state(self, input_dir: str | Path | None = None) -> Path:
        """Restore a checkpoint written by `save_state`; returns its folder.

        Without `input_dir`, loads the newest complete checkpoint under `project_dir/checkpoints`.
        """
        return checkpointing.load_state(self, input_dir)

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Add objects with `state_dict()`/`load_state_dict()` to what checkpoints save and restore."""
        self._checkpointed_objects.extend(checkpointing.check_registrable(objects))

    # ----------------------------------------------------------------- processes
    def end_training(self) -> None:
        """Release what the precision set up; with several processes, wait for all of them and leave
        the process group (a later Accelerator in this process creates a new one)."""
        self._finish_trackers()
        self.precision.teardown()
        if self.state.distributed:
            self.wait_for_everyone()
            distributed.leave_process_group()

    def _check_same_setup_on_every_process(self) -> None:
        """Compare this process's configuration with the others' (one small all-gather); raise if any differs."""
        if not self.state.distributed:
            return
        recipes = {kind.__name__: self.handlers.get(kind) for kind in self.precision.handler_types}
        distributed.check_same_setup(
            distributed.setup_fingerprint(
                mixed_precision=self.mixed_precision,
                gradient_accumulation_steps=self.gradient_accumulation_steps,
                device_type=self.device.type,
                backend=self.state.backend,
                ddp=self.handlers.get(DistributedDataParallelKwargs),
                **recipes,
            )
        )

    def __repr__(self) -> str:
        return (
            f"Accelerator(mixed_precision={self.mixed_precision!r}, device={self.device}, "
            f"gradient_accumulation_steps={self.gradient_accumulation_steps}, "
            f"process {self.process_index} of {self.num_processes})"
        )


def _with_environment_recipe(handlers: Handlers) -> Handlers:
    """Add the FP8 recipe that `accel launch` passed as ACCEL_FP8_* variables, if any.

    A recipe given in the code wins; when it differs from the environment's, a warning says so.
    """
    recipe = fp8_recipe_from_env()
    if recipe is not None and handlers.has(FP8RecipeKwargs) and handlers.get(FP8RecipeKwargs) != recipe:
        warnings.warn(
            f"the FP8RecipeKwargs given in the code overrides the recipe from ACCEL_FP8_* variables ({recipe}).",
            UserWarning,
            stacklevel=3,
        )
    return handlers.with_environment(recipe)


def _positive_int(argument: str, value: Any) -> int:
    return check_int(argument, value, minimum=1)


def _setting(setting: Setting, value: Any, check: Callable[[str, Any], Any]) -> Any:
    """The keyword's value when given (checked), else the environment's, else the default.

    A keyword that contradicts the environment (say `accel launch --mixed_precision fp16` for a
    script that passes mixed_precision='bf16') wins, with a warning naming both.
    """
    if value is None:
        return setting.from_env()
    checked = check(setting.keyword, value)
    if setting.env_var in os.environ and setting.from_env() != checked:
        warnings.warn(
            f"{setting.keyword}={value!r} given in the code overrides "
            f"{setting.env_var}={os.environ[setting.env_var]!r} "
            "(from accel launch or your environment).",
            UserWarning,
            stacklevel=3,
        )
    return checked
