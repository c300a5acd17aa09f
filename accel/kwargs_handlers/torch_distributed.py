"""Options for torch.distributed: the process group and DistributedDataParallel.

They take effect when the script runs in several processes (`accel launch --num_processes N`);
in a single process there is no process group and no DDP wrapper to apply them to.
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
from typing import Any

from accel._validation import check_bool, check_choice
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler
from accel.kwargs_handlers.comm_hooks import (
    POWER_SGD_HOOKS,
    WRAPPERS,
    DDPCommunicationHookType,
    as_hook_type,
    check_backend,
    register_comm_hook,
)

PROCESS_GROUP_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl")


@kwargs_handler()
class DistributedDataParallelKwargs(KwargsHandler):
    """Options passed to torch.nn.parallel.DistributedDataParallel, and the communication hook
    registered on it (`comm_hook`, `comm_wrapper`, `comm_state_option`: see comm_hooks.py)."""

    dim: int = 0
    """The batch dimension DDP scatters inputs along (torch's option; default 0)."""
    broadcast_buffers: bool = True
    """Broadcast the model's buffers (BatchNorm statistics...) from process 0 at each forward."""
    bucket_cap_mb: float = 25
    """The size, in MiB, of the gradient buckets DDP all-reduces together (a number > 0)."""
    find_unused_parameters: bool = False
    """Look for parameters that got no gradient in each backward (needed when the forward skips some; slower)."""
    check_reduction: bool = False
    """Passed on to DDP, which deprecates it (it warns and ignores it); kept for Accelerate's signature."""
    gradient_as_bucket_view: bool = False
    """Make gradients views into DDP's buckets, which saves a copy and memory."""
    static_graph: bool = False
    """Tell DDP the set of used parameters and the graph do not change between iterations (faster)."""
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    """How gradient buckets are all-reduced: NO (float32), FP16, BF16, POWER_SGD, BATCHED_POWER_SGD."""
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    """FP16 or BF16: compress what a PowerSGD hook sends."""
    comm_state_option: dict[str, Any] = dataclasses.field(default_factory=dict)
    """PowerSGDState's options (matrix_approximation_rank, start_powerSGD_iter, ...), for a PowerSGD hook."""

    def __post_init__(self) -> None:
        owner = "DistributedDataParallelKwargs"
        for name in ("broadcast_buffers", "find_unused_parameters", "check_reduction", "gradient_as_bucket_view", "static_graph"):
            check_bool(f"{owner}.{name}", getattr(self, name))
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise ValueError(f"{owner}.dim={self.dim!r} must be an int (the batch dimension; default 0).")
        cap = self.bucket_cap_mb
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0:
            raise ValueError(f"{owner}.bucket_cap_mb={cap!r} must be a number > 0 (default 25).")
        hook = as_hook_type(f"{owner}.comm_hook", self.comm_hook, tuple(DDPCommunicationHookType))
        wrapper = as_hook_type(f"{owner}.comm_wrapper", self.comm_wrapper, WRAPPERS)
        object.__setattr__(self, "comm_hook", hook)
        object.__setattr__(self, "comm_wrapper", wrapper)
        if wrapper is not DDPCommunicationHookType.NO and hook not in POWER_SGD_HOOKS:
            raise ValueError(
                f"{owner}(comm_wrapper={wrapper.name}) compresses what a PowerSGD hook sends, and comm_hook is "
                f"{hook.name}: give comm_hook=DDPCommunicationHookType.POWER_SGD (or BATCHED_POWER_SGD), or leave the "
                "wrapper out (comm_hook=FP16 or BF16 already all-reduces in 16 bits)."
            )
        self._check_state_options(hook)

    def _check_state_options(self, hook: DDPCommunicationHookType) -> None:
        options = self.comm_state_option
        if not isinstance(options, dict):
            raise TypeError(f"DistributedDataParallelKwargs.comm_state_option={options!r} must be a dict.")
        if not options:
            return
        if hook not in POWER_SGD_HOOKS:
            raise ValueError(
                f"DistributedDataParallelKwargs.comm_state_option={options!r} configures PowerSGD, and comm_hook is "
                f"{hook.name}: give a PowerSGD comm_hook, or leave the options out."
            )
        from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

        known = set(inspect.signature(PowerSGDState.__init__).parameters) - {"self", "process_group"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"DistributedDataParallelKwargs.comm_state_option has unknown keys {unknown}; PowerSGDState takes "
                f"{sorted(known)}."
            )

    def ddp_kwargs(self) -> dict[str, Any]:
        """The options DistributedDataParallel itself takes, those that differ from the defaults."""
        return {k: v for k, v in self.to_kwargs().items() if k not in ("comm_hook", "comm_wrapper", "comm_state_option")}

    def check_backend(self, backend: str | None) -> None:
        """Raise ValueError when the process group's `backend` cannot run the chosen hook (bf16 off nccl/xccl).

        Args:
            backend: The process group's backend (`"gloo"`, `"nccl"`, ...), None in one process.
        """
        check_backend(self.comm_hook, self.comm_wrapper, backend)

    def register_comm_hook(self, model: Any) -> None:
        """Register the communication hook (if any) on the DistributedDataParallel `model`.

        Args:
            model: The DistributedDataParallel-wrapped model.
        """
        register_comm_hook(model, self.comm_hook, self.comm_wrapper, self.comm_state_option)


@kwargs_handler()
class InitProcessGroupKwargs(KwargsHandler):
    """Options passed to torch.distributed.init_process_group."""

    backend: str | None = None
    """gloo, nccl, mpi, ucc or xccl; None picks nccl on CUDA and gloo on CPU."""
    init_method: str | None = None
    """A URL such as tcp://host:port; None uses the environment that torchrun sets."""
    timeout: datetime.timedelta = datetime.timedelta(minutes=30)
    """How long collectives wait for every process before failing. When not given, ACCEL_COLLECTIVE_TIMEOUT
    (`accel launch --collective_timeout SECONDS`, config key collective_timeout) applies, else 30 minutes."""

    def __post_init__(self) -> None:
        if self.backend is not None:
            backend = check_choice("InitProcessGroupKwargs.backend", self.backend, PROCESS_GROUP_BACKENDS)
            object.__setattr__(self, "backend", backend)
        if self.init_method is not None and not isinstance(self.init_method, str):
            raise TypeError(f"InitProcessGroupKwargs.init_method={self.init_method!r} must be a string or None.")
        if not isinstance(self.timeout, datetime.timedelta) or self.timeout.total_seconds() <= 0:
            raise ValueError(
                f"InitProcessGroupKwargs.timeout={self.timeout!r} must be a positive datetime.timedelta."
            )
