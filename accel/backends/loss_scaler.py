"""LossScaler: dynamic loss scaling with torch.amp.GradScaler, for fp16 and for MS-AMP.

MS-AMP's examples scale the loss with torch's GradScaler (MS-AMP teaches its unscale kernel
about its own gradient tensors). This class keeps the scaler and adds what torch leaves out:

- A step counts as skipped exactly when torch's scaler found inf/NaN in its gradients (the
  same test torch uses to decide whether to step), whatever the scale does. torch reads its
  found_inf flags back from the device to decide; reading them a second time on every step costs
  about a microsecond, so a post-step hook on the optimizer says when the step ran, and the flags
  are read only when it did not (a skip, or an optimizer the hook cannot watch).
- The scale never drops below a floor (GradScalerKwargs.min_scale, 1.0 by default). torch's
  scale otherwise halves on and on: after ~166 overflows in a row it is 0.0, the inverse scale
  overflows, gradients are unscaled into NaN *after* torch checked them, and NaN reaches the
  weights. At a scale >= 1, unscaling only shrinks gradients, so the check stays exact.
- A run whose steps keep being skipped at the floor stops with LossScaleOverflowError instead
  of training on without ever stepping.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from accel.kwargs_handlers import GradScalerKwargs


class LossScaleOverflowError(RuntimeError):
    """Too many optimizer steps in a row were skipped for inf/NaN gradients at the lowest loss scale."""


class LossScaler:
    """A torch.amp.GradScaler built from GradScalerKwargs, with a floor and the skipped-step counts."""

    def __init__(self, device: torch.device, options: GradScalerKwargs) -> None:
        self.scaler = torch.amp.GradScaler(
            device.type,
            init_scale=options.init_scale,
            growth_factor=options.growth_factor,
            backoff_factor=options.backoff_factor,
            growth_interval=options.growth_interval,
            enabled=options.enabled,
        )
        self._enabled = self.scaler.is_enabled()
        """Fixed once the GradScaler is built (torch has no way to switch it); read on every step."""
        self.floor = torch.tensor(options.scale_floor, dtype=torch.float32).item()  # as the fp32 scale holds it
        self.max_consecutive_skips = options.max_consecutive_skips
        self.skipped_steps = 0
        self.consecutive_skips = 0
        """Steps skipped in a row (reset by a step that ran)."""
        self._step_seen = _StepSeen()
        self._watched: dict[int, weakref.ref[Any]] = {}
        """id -> weak reference of each optimizer `_watch` has seen (whether it could hook it or not)."""

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.scaler.scale(loss).backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        """Step unless gradients hold inf/NaN; update the scale. False when the step was skipped.

        Raises LossScaleOverflowError when `max_consecutive_skips` steps in a row were skipped
        with the scale at its floor (the skipped step is counted and the scale updated first).
        """
        if not self._enabled:
            optimizer.step() if closure is None else optimizer.step(closure)
            return True
        known = self._watched.get(id(optimizer))  # inline: a call less per step once it is watched
        if known is None or known() is not optimizer:
            self._watch(optimizer)
        self._step_seen.seen = False
        self.scaler.step(optimizer) if closure is None else self.scaler.step(optimizer, closure)
        skipped = not self._step_seen.seen and self._found_inf(optimizer)
        self.scaler.update()
        if not skipped:
            self.consecutive_skips = 0
            return True
        self.skipped_steps += 1
        self.consecutive_skips += 1
        scale = self.scaler.get_scale()
        if scale <= self.floor:
            if scale < self.floor:
                self.scaler.update(new_scale=self.floor)
            if self.consecutive_skips >= self.max_consecutive_skips:
                raise LossScaleOverflowError(self._overflow_message())
        return False

    def _found_inf(self, optimizer: torch.optim.Optimizer) -> bool:
        """torch's own test in GradScaler.step, read back before update() clears the flags."""
        return bool(sum(v.item() for v in self.scaler._found_inf_per_device(optimizer).values()))

    def _watch(self, optimizer: torch.optim.Optimizer) -> None:
        """Hook `optimizer`'s step, so that `_step_seen` says when GradScaler.step ran it (called for
        an optimizer not watched yet).

        Only where the hook's firing means the step ran: a torch Optimizer (which runs step hooks)
        that does not take the scaler into its own step (`_step_supports_amp_scaling`, fused
        optimizers: GradScaler calls their step on every step and they skip inside). Any other
        object (MS-AMP's or the FP8 level's stepper, say) is remembered unhooked, and each of its
        steps reads found_inf. A weak reference tells a new optimizer from a dead one with its id.
        """
        try:
            self._watched[id(optimizer)] = weakref.ref(optimizer)
        except TypeError:  # cannot be weakly referenced: found_inf is read on each of its steps
            return
        if isinstance(optimizer, torch.optim.Optimizer) and not getattr(optimizer, "_step_supports_amp_scaling", False):
            optimizer.register_step_post_hook(self._step_seen)

    def __getstate__(self) -> dict[str, Any]:
        """The state without the watched optimizers (weak references do not pickle, and torch does not
        pickle an optimizer's hooks): a copy watches the optimizers it steps afresh."""
        state = self.__dict__.copy()
        state["_step_seen"] = _StepSeen()
        state["_watched"] = {}
        return state

    def _overflow_message(self) -> str:
        return (
            f"loss scaling: the last {self.consecutive_skips} optimizer steps in a row were skipped because their "
            f"gradients held inf or NaN, and the loss scale is at its floor ({self.floor}), where lowering it "
            "cannot help: the forward or backward pass itself overflows float16 (largest value 65504) or makes "
            "NaN. The skipped steps wrote nothing into the weights or the optimizer state. "
            "To fix it: train in mixed_precision='bf16' (fp32's range), lower the learning rate, check the inputs "
            "and the loss for inf/NaN, or allow more skips with "
            f"GradScalerKwargs(max_consecutive_skips=...) (now {self.max_consecutive_skips})."
        )

    def stats(self) -> dict[str, float]:
        return {"loss_scale": self.scaler.get_scale(), "skipped_steps": self.skipped_steps}

    def state_dict(self) -> dict[str, Any]:
        return {
            "scaler": self.scaler.state_dict(),
            "skipped_steps": self.skipped_steps,
            "consecutive_skips": self.consecutive_skips,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`; a checkpoint from before `consecutive_skips` existed restores it as 0."""
        self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state["skipped_steps"])
        self.consecutive_skips = int(state.get("consecutive_skips", 0))


class _StepSeen:
    """An optimizer step post-hook that notes that the step ran (GradScaler.step did not skip it).

    A small object of its own rather than a LossScaler method, so that an optimizer keeps only
    this flag alive, not the scaler that hooked it.
    """

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, optimizer: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.seen = True
