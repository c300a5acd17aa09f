"""ThroughputMonitor: samples/s, tokens/s, step time and MFU of a training loop, from hooks.

It hooks only what prepare() returns, and only when asked for (ThroughputKwargs or the setting
log_throughput): a forward pre-hook on each prepared model counts the samples and tokens of its
training-mode calls, a step post-hook on the first prepared optimizer closes each step. With the
monitor off nothing is hooked, so the training step runs exactly the code it runs without it.

The first step is not timed (set-up, compilation and the FLOP count happen in it). From then
on, every `log_every` steps the window's numbers are computed (after waiting for the device, so
that queued work is counted where it ran) and handed to `log`; `latest_window` says which steps
they cover, so that a progress line can show rates of one window and name it. MFU is at most 1:
where the counted rate exceeds the device's peak it is left out (peaks.utilization).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from accel.kwargs_handlers.monitoring import ThroughputKwargs
from accel.monitoring.inputs import count_call
from accel.monitoring.peaks import utilization

Log = Callable[[dict[str, float], int], None]
"""Receives each window's numbers and the optimizer step they end at."""
PREFIX = "throughput/"


class ThroughputMonitor:
    """Counts samples, tokens and steps; every `options.log_every` steps computes the rates and MFU.

    `data_parallel_size` scales this process's samples and tokens to the whole run's (every data-parallel
    process sees as many); per-device numbers and MFU are this process's own.

    Example (what the Accelerator does): `monitor.watch_model(model); monitor.watch_optimizer(optimizer)`;
    `monitor.latest` then holds the last window's numbers, e.g. `{"throughput/tokens_per_s": 5210.0, ...}`.
    """

    def __init__(
        self, options: ThroughputKwargs, device: torch.device, compute_dtype: torch.dtype, data_parallel_size: int,
        log: Log,
    ) -> None:
        self.options = options
        self.device = device
        self.compute_dtype = compute_dtype
        self.data_parallel_size = data_parallel_size
        self._log = log
        self.steps = 0
        """Optimizer steps seen."""
        self.latest: dict[str, float] = {}
        """The last window's numbers (empty until the first window ends)."""
        self.latest_window: tuple[int, int] | None = None
        """The first and last optimizer step the last window's numbers cover (None until the first window ends)."""
        self.flops_per_token = options.flops_per_token
        self.flops_per_sample = options.flops_per_sample
        self._counter: FlopCounterMode | None = None
        self._pending = [0, 0]  # samples, tokens since the window started
        self._window_start = 0.0
        self._window_steps = 0
        self._stepping: object | None = None

    def watch_model(self, model: nn.Module) -> None:
        """Count the samples and tokens of `model`'s training-mode calls."""
        model.register_forward_pre_hook(self._before_forward, with_kwargs=True)

    def watch_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Close a step at each step of `optimizer` (the first one watched: several optimizers step together)."""
        if self._stepping is None:
            self._stepping = optimizer
            optimizer.register_step_post_hook(self._after_step)

    def _before_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        if not module.training:
            return
        samples, tokens = count_call(args, kwargs, self.options.length_fn)
        self._pending[0] += samples
        self._pending[1] += tokens
        if self.steps == 0 and self._counter is None and self._counts_flops():
            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()

    def _counts_flops(self) -> bool:
        """Count on the first step only with a prepared optimizer to end the count (else it would never stop)."""
        formula = self.flops_per_token is not None or self.flops_per_sample is not None
        return self.options.count_flops and not formula and self._stepping is not None

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps += 1
        if self.steps == 1:
            self._finish_count()
            self._start_window()
            return
        self._window_steps += 1
        if self._window_steps >= self.options.log_every:
            self.latest = self._window_numbers()
            self.latest_window = (self.steps - self._window_steps + 1, self.steps)
            self._log(self.latest, self.steps)
            self._start_window()

    def _finish_count(self) -> None:
        """Stop the first step's FLOP count; FLOPs per token (per sample where the calls carry no tokens)."""
        if self._counter is None:
            return
        counter, self._counter = self._counter, None
        counter.__exit__(None, None, None)
        flops = counter.get_total_flops()
        samples, tokens = self._pending
        if flops > 0 and tokens > 0:
            self.flops_per_token = flops / tokens
        elif flops > 0 and samples > 0:
            self.flops_per_sample = flops / samples

    def _synchronize(self) -> None:
        module = getattr(torch, self.device.type, None)
        if self.device.type != "cpu" and module is not None and hasattr(module, "synchronize"):
            module.synchronize(self.device)

    def _start_window(self) -> None:
        self._synchronize()
        self._window_start = time.perf_counter()
        self._pending = [0, 0]
        self._window_steps = 0

    def _window_numbers(self) -> dict[str, float]:
        """The rates of the window that ends now."""
        self._synchronize()
        elapsed = max(time.perf_counter() - self._window_start, 1e-9)
        samples, tokens = self._pending
        numbers = {
            "step_time_s": elapsed / self._window_steps,
            "samples_per_s": samples / elapsed * self.data_parallel_size,
            "samples_per_s_per_device": samples / elapsed,
        }
        if tokens:
            numbers["tokens_per_s"] = tokens / elapsed * self.data_parallel_size
            numbers["tokens_per_s_per_device"] = tokens / elapsed
        flops = self._window_flops(samples, tokens)
        if flops is not None:
            numbers["tflops_per_device"] = flops / elapsed / 1e12
            mfu = utilization(flops / elapsed, self.device, self.compute_dtype, self.options.peak_flops)
            if mfu is not None:
                numbers["mfu"] = mfu
        return {PREFIX + name: value for name, value in numbers.items()}

    def _window_flops(self, samples: int, tokens: int) -> float | None:
        if self.flops_per_token is not None and tokens:
            return self.flops_per_token * tokens
        if self.flops_per_sample is not None and samples:
            return self.flops_per_sample * samples
        return None
