"""Options of the run monitors: throughput/MFU (ThroughputKwargs) and loss spikes (SpikeDetectionKwargs).

Giving either handler to `Accelerator(kwarg_handlers=[...])` turns its monitor on; the settings
`log_throughput` and `spike_detection` (config key, `accel launch` flag, ACCEL_ variable) turn
them on with these defaults. What they measure and how: docs/tracking.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from accel._validation import check_bool, check_choice, check_int
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler

SPIKE_ACTIONS: tuple[str, ...] = ("log", "checkpoint", "stop")
"""What the spike detector does at a spike: log it, save a checkpoint first (and go on), or stop the run."""


def _check_positive_number(argument: str, value: Any, *, or_none: bool = False) -> None:
    if value is None and or_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        more = " or None" if or_none else ""
        raise ValueError(f"{argument}={value!r} is not accepted: give a finite number > 0{more}.")


@kwargs_handler()
class ThroughputKwargs(KwargsHandler):
    """Measure samples/s, tokens/s, step time and MFU of the training loop, logged every `log_every` steps.

    A step is a step of a prepared optimizer; samples and tokens are read from what a prepared
    model is called with in training mode. The numbers are in `accelerator.throughput` and, when
    trackers run, logged with `accelerator.log` under `throughput/...`.

    Example: `Accelerator(kwarg_handlers=[ThroughputKwargs(log_every=50, flops_per_token=6 * n_params)])`.
    """

    log_every: int = 10
    """Optimizer steps per measurement window (and per `accelerator.log` call)."""
    length_fn: Callable[[Any], int] | None = None
    """Tokens of one model call, given what the model was called with (its one positional argument, else the
    dict of its keyword arguments); None: the `input_ids` keyword, else an integer first argument, counted whole."""
    flops_per_token: float | None = None
    """Model FLOPs (forward and backward) per token, e.g. 6 * parameters for a transformer; None: counted."""
    flops_per_sample: float | None = None
    """Model FLOPs (forward and backward) per sample, for models without tokens; None: counted."""
    count_flops: bool = True
    """Count the FLOPs of the first step with torch's FlopCounterMode when no formula is given (False: no MFU)."""
    peak_flops: float | None = None
    """The device's peak FLOP/s for MFU; None: the table of known GPUs, or on the CPU measured (one core's matmul
    rate per CPU-second, times torch's threads: load cannot shrink it)."""

    def __post_init__(self) -> None:
        check_int("ThroughputKwargs.log_every", self.log_every, minimum=1)
        if self.length_fn is not None and not callable(self.length_fn):
            raise TypeError(f"ThroughputKwargs.length_fn={self.length_fn!r} is not callable: give a function "
                            "batch -> number of tokens, or None.")
        for name in ("flops_per_token", "flops_per_sample", "peak_flops"):
            _check_positive_number(f"ThroughputKwargs.{name}", getattr(self, name), or_none=True)
        if self.flops_per_token is not None and self.flops_per_sample is not None:
            raise ValueError("ThroughputKwargs got both flops_per_token and flops_per_sample: give one formula.")
        check_bool("ThroughputKwargs.count_flops", self.count_flops)


@kwargs_handler()
class SpikeDetectionKwargs(KwargsHandler):
    """Watch the loss given to `accelerator.backward` for spikes: a loss far above its recent window.

    A loss is a spike when it is not finite, or when it exceeds the mean of the last `window`
    losses by more than `threshold` standard deviations and by more than `min_rise` of the mean
    (both), once `warmup` losses were seen. Spikes do not enter the window. Every process judges
    the same number (the loss averaged over the processes), so all act alike.

    Example: `Accelerator(project_dir="runs", kwarg_handlers=[SpikeDetectionKwargs(action="checkpoint")])`.
    """

    action: str = "log"
    """"log" (warn and log `loss_spike`), "checkpoint" (also save_state before the step's update, then go on) or
    "stop" (raise LossSpikeError before the step's backward)."""
    window: int = 50
    """Recent losses the rule compares with."""
    threshold: float = 6.0
    """Standard deviations above the window's mean."""
    min_rise: float = 0.2
    """Fraction of the window's mean the loss must exceed it by as well (a flat, quiet loss has a tiny deviation)."""
    warmup: int = 20
    """Losses seen before judging (at most `window`)."""
    checkpoint_dir: str | os.PathLike[str] | None = None
    """Where action="checkpoint" saves, a folder per spike: <checkpoint_dir>/spike_step_<n>; None: <project_dir>/spikes."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", check_choice("SpikeDetectionKwargs.action", self.action, SPIKE_ACTIONS))
        check_int("SpikeDetectionKwargs.window", self.window, minimum=2)
        check_int("SpikeDetectionKwargs.warmup", self.warmup, minimum=2)
        if self.warmup > self.window:
            raise ValueError(f"SpikeDetectionKwargs.warmup={self.warmup} is more than window={self.window}: the window "
                             "never holds that many losses. Give warmup <= window.")
        _check_positive_number("SpikeDetectionKwargs.threshold", self.threshold)
        if isinstance(self.min_rise, bool) or not isinstance(self.min_rise, (int, float)) or not self.min_rise >= 0:
            raise ValueError(f"SpikeDetectionKwargs.min_rise={self.min_rise!r} is not accepted: give a number >= 0 "
                             "(0.2: 20% above the window's mean).")
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, (str, os.PathLike)):
            raise TypeError(f"SpikeDetectionKwargs.checkpoint_dir={self.checkpoint_dir!r}: give a folder (str or "
                            "path), or None.")
