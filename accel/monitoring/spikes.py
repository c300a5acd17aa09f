"""SpikeDetector: a loss far above its recent window, seen in accelerator.backward, logged, saved before, or stopped.

The rule (SpikeDetectionKwargs): once `warmup` losses were seen, a loss is a spike when it is not
finite, or when it exceeds the mean of the last `window` ordinary losses by more than `threshold`
standard deviations and by more than `min_rise` times the mean. Spikes stay out of the window, so
one spike does not hide the next. The loss judged is the mean over the processes (one all-reduce
of a number per backward when distributed), so every process takes the same decision and a
checkpoint or a stop happens on all of them together.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from accel.kwargs_handlers.monitoring import SpikeDetectionKwargs

logger = logging.getLogger("accel.monitoring")


class LossSpikeError(RuntimeError):
    """Raised by accelerator.backward under SpikeDetectionKwargs(action="stop") at a loss spike."""


@dataclass(frozen=True)
class Spike:
    """One spike: the optimizer step (counted from 0) and micro-batch it came in, the loss, and the window's
    mean and standard deviation it was judged against."""

    step: int
    micro_batch: int
    loss: float
    mean: float
    std: float

    def describe(self) -> str:
        """One sentence for the log and the error."""
        return (
            f"loss spike at optimizer step {self.step} (micro-batch {self.micro_batch}, counted from 0): loss "
            f"{self.loss:.6g} against a mean of {self.mean:.6g} (std {self.std:.3g}) over the recent losses"
        )


class SpikeDetector:
    """Judges each loss given to accelerator.backward; `on_spike(spike)` acts (log, checkpoint, stop).

    Example: `detector.observe(loss, ends_step=True)` before the backward; `detector.spikes` lists those found.
    """

    def __init__(self, options: SpikeDetectionKwargs, distributed: bool, on_spike: Callable[[Spike], None]) -> None:
        self.options = options
        self._distributed = distributed
        self._on_spike = on_spike
        self._window: collections.deque[float] = collections.deque(maxlen=options.window)
        self.spikes: list[Spike] = []
        """Every spike found, in order."""
        self.step = 0
        """Optimizer steps completed (the step the next loss belongs to)."""
        self.micro_batch = 0
        """Losses seen (micro-batches)."""

    def observe(self, loss: torch.Tensor, ends_step: bool) -> None:
        """Judge `loss` (the micro-batch's, before the division by the accumulation steps); act on a spike."""
        value = self._global_value(loss)
        spike = self._judge(value)
        if spike is None:
            self._window.append(value)
        else:
            self.spikes.append(spike)
            self._on_spike(spike)  # may raise (stop): the counts below then stay at the spike
        self.micro_batch += 1
        if ends_step:
            self.step += 1

    def _global_value(self, loss: torch.Tensor) -> float:
        value = loss.detach().float().mean().reshape(1)
        if self._distributed and dist.is_available() and dist.is_initialized():
            value = value.clone()
            dist.all_reduce(value)
            value /= dist.get_world_size()
        return float(value.item())

    def _mean_std(self) -> tuple[float, float]:
        """The window's mean and (population) standard deviation; plain sums: statistics.pstdev is exact but
        some ten times slower, which a per-step check would pay."""
        count = len(self._window)
        if not count:
            return math.nan, math.nan
        mean = sum(self._window) / count
        return mean, math.sqrt(sum((v - mean) ** 2 for v in self._window) / count)

    def _judge(self, value: float) -> Spike | None:
        """The spike `value` is, or None."""
        if not math.isfinite(value):
            return Spike(self.step, self.micro_batch, value, *self._mean_std())
        if len(self._window) < self.options.warmup:
            return None
        mean, std = self._mean_std()
        rise = value - mean
        if rise > self.options.threshold * std and rise > self.options.min_rise * abs(mean):
            return Spike(self.step, self.micro_batch, value, mean, std)
        return None
