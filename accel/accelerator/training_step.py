"""The Accelerator's training-loop methods: `backward`, `autocast`, `accumulate`, and clipping.

A mixin of `Accelerator` (accelerator.py), which sets what it reads (declared below): the prepared
objects, the gradient state, the strategy, the precision and the accumulation plugin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from accel.backends.base import PrecisionBackend
from accel.distributed import stall_marks
from accel.kwargs_handlers import AutocastKwargs
from accel.monitoring import SpikeDetector
from accel.parallel.strategy import ParallelStrategy
from accel.training.accumulation import GradientAccumulationPlugin
from accel.training.gradient_state import GradientState
from accel.training.prepared import PreparedObjects

_BACKWARD = stall_marks.label("backward (DDP's gradient all-reduce)")
"""How a process in `Accelerator.backward` shows in a stall report."""


class TrainingStepMixin:
    """What a training loop calls between the forward and the optimizer step."""

    prepared: PreparedObjects
    gradient_state: GradientState
    strategy: ParallelStrategy
    precision: PrecisionBackend
    gradient_accumulation_plugin: GradientAccumulationPlugin
    spike_detector: SpikeDetector | None  # MonitoringMixin's
    no_sync: Callable[[nn.Module], AbstractContextManager[Any]]  # SyncMixin's

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate `loss`: use it instead of `loss.backward()`.

        The loss is divided by the gradient accumulation steps, multiplied by the loss scale under
        fp16, and backpropagated through the strategy (DDP all-reduces the gradients on a micro-batch
        that syncs; DeepSpeed's engine runs its own backward). Raises RuntimeError before `prepare`
        (the precision could not apply). With spike detection on, the loss is checked first.

        Args:
            loss: The scalar loss of this micro-batch.
            **kwargs: Passed on to torch's `backward` (e.g. `retain_graph=True`).

        Example:
            ```python
            for x, y in loader:
                loss = loss_fn(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            ```
        """
        if not self.prepared.models:
            raise RuntimeError(
                "backward() was called before prepare(): pass your model (and optimizer) to "
                "accelerator.prepare(...) first, so that the precision can be applied."
            )
        if self.spike_detector is not None:
            self.spike_detector.observe(loss, self.gradient_state.sync_gradients)
        marked = stall_marks.enter(_BACKWARD)  # DDP all-reduces gradients in backward: a wait `accel launch` watches
        try:
            self.strategy.backward(loss, self.gradient_state, **kwargs)
        finally:
            if marked:
                stall_marks.leave()

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> AbstractContextManager[Any]:
        """The precision's autocast, for code outside the prepared model (a loss, say).

        A prepared model's forward already runs under it. fp16/bf16 mixed (and fp8's base precision):
        torch.autocast on the device in the compute dtype; `16-true`/`bf16-true`/`64-true`: that default
        dtype for tensors made inside; fp32: nothing.

        Args:
            autocast_handler: Options for this block (`enabled`, `cache_enabled`); None: the
                Accelerator's `AutocastKwargs`, else the defaults.

        Returns:
            A context manager.

        Example:
            ```python
            with accelerator.autocast():
                loss = loss_fn(model(x), y)
            accelerator.backward(loss)
            ```
        """
        return self.precision.autocast(autocast_handler)

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """One micro-batch of gradient accumulation: wrap each training step in it.

        Decides `sync_gradients` (True every `gradient_accumulation_steps` micro-batches, and on the
        last batch of a prepared dataloader's epoch) and, on a micro-batch that does not sync, skips
        DDP's gradient all-reduce for `models` (unless `GradientAccumulationPlugin(sync_each_batch=True)`,
        which all-reduces every micro-batch). A prepared optimizer steps, and a prepared scheduler
        advances, only on a micro-batch that syncs, so the loop calls them every time.

        Args:
            *models: The prepared models whose gradient all-reduce is skipped between syncs
                (none: every micro-batch all-reduces in several processes).

        Example:
            ```python
            accelerator = Accelerator(gradient_accumulation_steps=4)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                with accelerator.accumulate(model):
                    accelerator.backward(loss_fn(model(x), y))
                    optimizer.step()  # steps on every 4th micro-batch only
                    optimizer.zero_grad()
            ```
        """
        if self.gradient_state.advance() or self.gradient_accumulation_plugin.sync_each_batch:
            yield
            return
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(self.no_sync(model))
            yield

    def unscale_gradients(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Divide the gradients by the loss scale now (fp16), to inspect or change them before the step.

        Done at most once per optimizer step (`clip_grad_norm_` and the step itself do not repeat
        it); nothing happens in precisions that do not scale the loss.

        Args:
            optimizer: The prepared optimizer (or the optimizer it wraps) whose gradients to
                unscale; None: every prepared one.
        """
        for wrapped in self.prepared.optimizers:
            if optimizer is None or optimizer is wrapped or optimizer is wrapped.optimizer:
                wrapped.unscale_gradients()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor | None:
        """Clip the gradients' total norm, in place of `torch.nn.utils.clip_grad_norm_`.

        Unscales the gradients first (fp16) and computes the norm the strategy's way (over every
        shard under FSDP2, FP8 gradients included). On a micro-batch that does not sync (inside
        gradient accumulation) the gradients are partial sums: nothing is clipped and None is
        returned (Accelerate clips them anyway).

        Args:
            parameters: The parameters (or one tensor) whose gradients to clip, usually
                `model.parameters()` of a prepared model.
            max_norm: The largest total norm allowed.
            norm_type: The p of the p-norm (`float("inf")` for the largest value); default 2.

        Returns:
            The total norm before clipping (one tensor), or None on a micro-batch that does not sync.

        Example:
            ```python
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            ```
        """
        if not self.gradient_state.sync_gradients:
            return None
        self.unscale_gradients()
        return self.strategy.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor] | torch.Tensor, clip_value: float) -> None:
        """Clip each gradient to [-clip_value, clip_value], in place of `torch.nn.utils.clip_grad_value_`.

        Unscales first (fp16); on a micro-batch that does not sync, does nothing.

        Args:
            parameters: The parameters (or one tensor) whose gradients to clip.
            clip_value: The largest absolute value a gradient element keeps.
        """
        if not self.gradient_state.sync_gradients:
            return
        self.unscale_gradients()
        nn.utils.clip_grad_value_(parameters, clip_value)
