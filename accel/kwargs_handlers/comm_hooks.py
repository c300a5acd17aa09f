"""DDP communication hooks chosen by name, as Accelerate's `DistributedDataParallelKwargs(comm_hook=...)`.

A hook changes how DDP all-reduces gradient buckets: in fp16 or bf16 (half the bytes on the wire,
the average rounded to 16 bits), or PowerSGD's low-rank approximation (far fewer bytes, with
error feedback). A wrapper (fp16 or bf16) compresses what a PowerSGD hook sends. They are torch's
own hooks (torch.distributed.algorithms.ddp_comm_hooks), registered on the prepared model.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.distributed import GradBucket
    from torch.futures import Future

    # A DDP communication hook: (its state, or a process group; the bucket) -> the reduced bucket.
    CommHook = Callable[[Any, GradBucket], Future[torch.Tensor]]


class DDPCommunicationHookType(str, enum.Enum):
    """Accelerate's names of torch's DDP communication hooks and wrappers."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


POWER_SGD_HOOKS = (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD)
WRAPPERS = (DDPCommunicationHookType.NO, DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16)


def as_hook_type(argument: str, value: Any, accepted: tuple[DDPCommunicationHookType, ...]) -> DDPCommunicationHookType:
    """`value` (a DDPCommunicationHookType or its string) as the enum, or ValueError naming `argument`."""
    try:
        hook = DDPCommunicationHookType(value.value if isinstance(value, enum.Enum) else str(value).lower())
    except ValueError:
        hook = None
    if hook not in accepted:
        names = ", ".join(f"DDPCommunicationHookType.{h.name}" for h in accepted)
        raise ValueError(f"{argument}={value!r} is not accepted; accepted values: {names} (or their strings).")
    return hook


_BF16_BACKENDS = ("nccl", "xccl")
"""Where torch's bf16 hooks run (its own check says CUDA 11+ with NCCL 2.10+, or XPU with XCCL)."""


def check_backend(hook: DDPCommunicationHookType, wrapper: DDPCommunicationHookType, backend: str | None) -> None:
    """Raise ValueError when the process group's `backend` cannot run a bf16 hook or wrapper (torch's
    DDP would refuse deep inside prepare with a TypeError)."""
    bf16 = [f"{name}=BF16" for name, value in (("comm_hook", hook), ("comm_wrapper", wrapper))
            if value is DDPCommunicationHookType.BF16]
    if bf16 and backend is not None and not any(b in _BF16_BACKENDS for b in backend.split(",")):
        raise ValueError(
            f"DistributedDataParallelKwargs({', '.join(bf16)}): torch's bf16 hooks need the nccl (CUDA) or xccl (XPU) "
            f"backend, and this run's process group uses {backend!r}. Use DDPCommunicationHookType.FP16 here, or run "
            "on GPUs."
        )


def register_comm_hook(
    model: Any, hook: DDPCommunicationHookType, wrapper: DDPCommunicationHookType, state_options: Mapping[str, Any]
) -> None:
    """Register torch's hook named by `hook` (wrapped by `wrapper`) on the DistributedDataParallel `model`."""
    if hook is DDPCommunicationHookType.NO:
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hooks: dict[DDPCommunicationHookType, CommHook] = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
        DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
        DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
    }
    wrappers = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper,
    }
    function = hooks[hook]
    if wrapper in wrappers:
        function = wrappers[wrapper](function)
    state = powerSGD_hook.PowerSGDState(process_group=None, **state_options) if hook in POWER_SGD_HOOKS else None
    model.register_comm_hook(state=state, hook=function)
