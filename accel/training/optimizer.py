"""AcceleratedOptimizer: the user's optimizer, stepped through the precision backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel.backends.base import PrecisionBackend
from accel.training.gradient_state import GradientState


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer: steps only on sync micro-batches, through the backend (loss scaling).

    It shares `param_groups` and `state` with the wrapped optimizer, so a learning-rate
    scheduler built on either sees the same values. Nothing is looked up or inspected per step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, backend: PrecisionBackend, gradients: GradientState):
        # Optimizer.__init__ is not called: all state lives in the wrapped optimizer.
        self.optimizer = optimizer
        self.original = optimizer
        """The optimizer given to prepare (a backend such as MS-AMP may replace `optimizer`)."""
        self._backend = backend
        self._drop_held_gradients = None if type(backend).zero_grad is PrecisionBackend.zero_grad else backend.zero_grad
        """The backend's zero_grad where it holds gradients outside param.grad (native FP8 O1/O2), else None."""
        self._gradients = gradients
        self._unscaled = False
        self._is_overflow = False  # Accelerate's name for it, which code written for Accelerate sets and reads

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = groups

    @property
    def state(self) -> Any:  # type: ignore[override]  # read-only view of the wrapped optimizer's
        return self.optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]  # read-only view of the wrapped optimizer's
        return self.optimizer.defaults

    @property
    def step_was_skipped(self) -> bool:
        """True when the last step was skipped because gradients held inf or NaN."""
        return self._is_overflow

    def step(self, closure: Callable[[], Any] | None = None) -> None:  # type: ignore[override]  # Accelerate's step
        """Step (through the loss scaler if there is one), on sync micro-batches only."""
        if self._gradients.sync_gradients:
            try:
                self._is_overflow = not self._backend.optimizer_step(self.optimizer, closure)
            finally:
                self._unscaled = False

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients, on sync micro-batches only (accumulation keeps them otherwise)."""
        if self._gradients.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)
            if self._drop_held_gradients is not None:
                self._drop_held_gradients(self.optimizer)

    def unscale_gradients(self) -> None:
        """Bring gradients to their true scale; a second call before the next step does nothing."""
        if not self._unscaled:
            self._backend.unscale_(self.optimizer)
            self._unscaled = True

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Optimizer.__setstate__ would patch this class's step with hooks the wrapped one runs.
        self.__dict__.update(state)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found normally: forward them (train()/eval() of
        # schedule-free optimizers, hooks, ...). "optimizer" itself is excluded for unpickling.
        if name == "optimizer":
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"
