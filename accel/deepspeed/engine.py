"""The prepared objects under DeepSpeed: the engine steps in `backward` (Accelerate's order), so the prepared
optimizer's and scheduler's own steps do nothing, and skipped fp16 steps are reported to the schedulers."""

from __future__ import annotations

from typing import Any

import torch

from accel.backends.base import PrecisionBackend
from accel.training.gradient_state import GradientState
from accel.training.optimizer import AcceleratedOptimizer


class DeepSpeedOptimizerWrapper(AcceleratedOptimizer):
    """The optimizer DeepSpeed built (its ZeRO optimizer around the script's): `step` and `zero_grad` do
    nothing, as the engine did both in `accelerator.backward`; `step_was_skipped` is the engine's overflow."""

    def __init__(self, optimizer: Any, original: Any, backend: PrecisionBackend, gradients: GradientState) -> None:
        super().__init__(optimizer, backend, gradients)
        self.original = original
        """The optimizer (or DummyOptim) given to prepare."""

    def step(self, closure: Any = None) -> None:  # type: ignore[override]  # Accelerate's step, as the base's
        """Nothing: the engine stepped in `accelerator.backward` (on the micro-batch that syncs)."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: the engine cleared the gradients after its step."""

    def unscale_gradients(self) -> None:
        """Nothing: the engine unscales fp16 gradients itself."""

    def __repr__(self) -> str:
        return f"DeepSpeedOptimizerWrapper({type(self.optimizer).__name__})"


class DeepSpeedSchedulerWrapper:
    """A scheduler DeepSpeed built from its config (or `DummyScheduler(lr_scheduler_callable=...)`): the engine
    steps it after each optimizer step, so `step` does nothing."""

    def __init__(self, scheduler: Any, optimizers: list[DeepSpeedOptimizerWrapper]) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: the engine stepped it."""

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)


class DeepSpeedEngineWrapper:
    """Runs `accelerator.backward` through the engine: the engine divides the loss by the accumulation steps,
    reduces the gradients and, on the micro-batch that syncs, clips and steps (Accelerate's class).

    Example: `DeepSpeedEngineWrapper(engine).backward(loss, sync_gradients=True)`.
    """

    def __init__(self, engine: Any, optimizers: list[DeepSpeedOptimizerWrapper] | None = None) -> None:
        self.engine = engine
        self.optimizers = optimizers or []

    def backward(self, loss: torch.Tensor, sync_gradients: bool = True, **kwargs: Any) -> None:
        engine = self.engine
        engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        engine.backward(loss, **kwargs)
        if sync_gradients:
            engine.step()
            skipped = bool(getattr(engine.optimizer, "overflow", False))
            for optimizer in self.optimizers:
                optimizer._is_overflow = skipped

    def get_global_grad_norm(self) -> float | None:
        """The gradients' global norm at the engine's last step (before clipping), or None if it kept none."""
        norm = self.engine.get_global_grad_norm()
        return norm.item() if hasattr(norm, "item") else norm
