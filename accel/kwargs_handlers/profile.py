"""Options of `accelerator.profile()`: torch.profiler's own (Accelerate's ProfileKwargs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from accel._validation import check_bool, choice_error
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler

if TYPE_CHECKING:  # torch is imported when a profiler is built: the CLI imports handlers without it
    import torch

_ACTIVITIES = ("cpu", "cuda", "xpu")
_SCHEDULE_KEYS = ("wait", "warmup", "active", "repeat", "skip_first")


@kwargs_handler()
class ProfileKwargs(KwargsHandler):
    """What `accelerator.profile()` records (fields of torch.profiler.profile, Accelerate's names)."""

    activities: tuple[str, ...] | None = None
    """"cpu", "cuda", "xpu"; None: the CPU and this process's accelerator."""
    schedule_option: Mapping[str, int] | None = None
    """torch.profiler.schedule's wait/warmup/active/repeat/skip_first; None records every step."""
    on_trace_ready: Callable[[Any], None] | None = None
    """Called with the profiler each time a scheduled trace is ready (e.g. torch.profiler.tensorboard_trace_handler)."""
    record_shapes: bool = False
    """Record the input shapes of each operator."""
    profile_memory: bool = False
    """Record the memory each operator allocates and frees."""
    with_stack: bool = False
    """Record the Python source location of each operator (larger traces)."""
    with_flops: bool = False
    """Estimate the FLOPs of matrix multiplications and convolutions."""
    with_modules: bool = False
    """Record the module hierarchy (the nn.Module names) each operator runs under."""
    output_trace_dir: str | None = None
    """Where each process writes its Chrome trace (`profile_<process>.json`, as Accelerate) when the block ends."""

    def __post_init__(self) -> None:
        for name in ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules"):
            check_bool(f"ProfileKwargs.{name}", getattr(self, name))
        for activity in self.activities or ():
            if activity not in _ACTIVITIES:
                raise choice_error("ProfileKwargs.activities", activity, _ACTIVITIES)
        unknown = sorted(set(self.schedule_option or {}) - set(_SCHEDULE_KEYS))
        if unknown:
            raise ValueError(f"ProfileKwargs.schedule_option has unknown keys {unknown}; accepted: {_SCHEDULE_KEYS}.")

    def build(self, device: torch.device) -> torch.profiler.profile:
        """The torch profiler these options describe, for a process training on `device`.

        Args:
            device: The process's device: its type is profiled too when `activities` is None.

        Returns:
            A `torch.profiler.profile`, not started.
        """
        import torch

        kinds = torch.profiler.ProfilerActivity
        names = self.activities or ("cpu", *((device.type,) if device.type in _ACTIVITIES else ()))
        schedule = torch.profiler.schedule(**self.schedule_option) if self.schedule_option else None
        return torch.profiler.profile(
            activities=[getattr(kinds, name.upper()) for name in dict.fromkeys(names)],
            schedule=schedule,
            on_trace_ready=self.on_trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
            with_modules=self.with_modules,
        )
