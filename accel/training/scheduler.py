"""AcceleratedScheduler: a learning-rate scheduler stepped the way Accelerate steps it.

By default a prepared scheduler advances exactly as under Accelerate, so that a script's
learning rate is the same at every step: once per process for each optimizer step (each
process's loader holds 1/N of the batches, so a schedule sized with `len(train_dataloader)`
before `prepare` still ends on time; published scripts also multiply their step counts by
`accelerator.num_processes`), once under `split_batches=True` (the loader's length does not
change), nothing on a micro-batch that does not sync, nothing when the optimizer skipped its
step (fp16 overflow), never past a scheduler's `total_steps` (OneCycleLR) except under
`split_batches`, and every call when `step_scheduler_with_optimizer=False`.

`GradientAccumulationPlugin(adjust_scheduler=...)` changes nothing here, as in Accelerate: its
scheduler would move torch's step counter on micro-batches that do not sync when its GradientState
reports `adjust_scheduler`, but that state keeps only the plugin's fields that differ from their
defaults, so the default True never reaches it and the counter never moves (Accelerate 1.x).

`Accelerator(scheduler_per_optimizer_step=True)` counts optimizer steps instead: one step per
optimizer step that really happened, whatever the number of processes, for a schedule sized in
optimizer steps (docs/precision.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor
from torch.optim.lr_scheduler import LRScheduler

from accel.training.gradient_state import GradientState
from accel.training.optimizer import AcceleratedOptimizer


class AcceleratedScheduler:
    """Steps the wrapped scheduler `steps_per_optimizer_step` times when its optimizers really stepped.

    Everything `step` needs is decided here, once, so that it does no look-ups: how many steps per
    optimizer step (`repeats`) and whether `total_steps` caps the schedule (`capped`). The Accelerator
    builds it with `for_accelerator`. Example (Accelerate's stepping on 2 processes):

        wrapped = AcceleratedScheduler.for_accelerator(
            scheduler, [optimizer], gradient_state, step_with_optimizer=True, num_processes=2,
            split_batches=False, per_optimizer_step=False,
        )
        wrapped.step()   # after an optimizer step: the schedule moves on by 2
    """

    def __init__(
        self,
        scheduler: LRScheduler,
        optimizers: Sequence[AcceleratedOptimizer],
        gradients: GradientState,
        step_with_optimizer: bool,
        *,
        repeats: int,
        capped: bool,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers
        self._gradients = gradients
        self.step_with_optimizer = step_with_optimizer
        self._repeats = repeats
        self._capped = capped

    @classmethod
    def for_accelerator(
        cls,
        scheduler: LRScheduler,
        optimizers: Sequence[AcceleratedOptimizer],
        gradients: GradientState,
        *,
        step_with_optimizer: bool,
        num_processes: int,
        split_batches: bool,
        per_optimizer_step: bool,
    ) -> AcceleratedScheduler:
        """Accelerate's stepping (module docstring); with `per_optimizer_step`, one step per optimizer step that
        really happened (no cap: torch's own checks apply)."""
        if per_optimizer_step:
            return cls(scheduler, optimizers, gradients, step_with_optimizer, repeats=1, capped=False)
        return cls(
            scheduler, optimizers, gradients, step_with_optimizer,
            repeats=1 if split_batches else num_processes,
            # Accelerate caps at total_steps only in its per-process loop, which split_batches bypasses.
            capped=not split_batches and hasattr(scheduler, "total_steps"),
        )

    @property
    def steps_per_optimizer_step(self) -> int:
        """How far the schedule moves on for one optimizer step (the number of processes, or 1)."""
        return self._repeats

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Advance the schedule as Accelerate does (module docstring): unless this micro-batch did not sync
        or a step was skipped, `steps_per_optimizer_step` times, never past `total_steps`.

        Runs once per training step: it reads the optimizers' flag directly rather than through
        their `step_was_skipped` property (one call less each, in a loop timed against plain torch).
        """
        scheduler = self.scheduler
        if not self.step_with_optimizer:
            scheduler.step(*args, **kwargs)
            return
        if not self._gradients.sync_gradients:
            return
        for optimizer in self.optimizers:
            if optimizer._is_overflow:
                return
        if not self._capped:
            for _ in range(self._repeats):
                scheduler.step(*args, **kwargs)
            return
        for _ in range(self._repeats):
            if scheduler._step_count <= scheduler.total_steps:  # type: ignore[attr-defined]  # OneCycleLR's
                scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float | Tensor]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"
