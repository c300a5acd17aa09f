"""Options for torch.distributed: the process group and DistributedDataParallel.

They take effect when the script runs in several processes (`accel launch --num_processes N`);
in a single process there is no process group and no DDP wrapper to apply them to.
"""

from __future__ import annotations

import datetime

from accel._validation import check_bool, check_choice
from accel.kwargs_handlers.base import KwargsHandler, kwargs_handler

PROCESS_GROUP_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl")


@kwargs_handler()
class DistributedDataParallelKwargs(KwargsHandler):
    """Options passed to torch.nn.parallel.DistributedDataParallel."""

    broadcast_buffers: bool = True
    bucket_cap_mb: float = 25
    find_unused_parameters: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False

    def __post_init__(self) -> None:
        for name in ("broadcast_buffers", "find_unused_parameters", "gradient_as_bucket_view", "static_graph"):
            check_bool(f"DistributedDataParallelKwargs.{name}", getattr(self, name))
        cap = self.bucket_cap_mb
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0:
            raise ValueError(f"DistributedDataParallelKwargs.bucket_cap_mb={cap!r} must be a number > 0 (default 25).")


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
