"""What O1/O2 storage needs from torch.distributed when several processes train one model.

DistributedDataParallel averages the gradients autograd writes into ``param.grad`` and, when
it wraps a model, copies process 0's parameters to the others. O1/O2 keep the gradients of
FP8 layers out of ``param.grad`` (in FP8), so for those parameters the backend does DDP's
work itself, and tells DDP to leave them alone:

* at conversion: mark them as parameters DDP ignores, and broadcast process 0's values;
* at each step: average their gradients over the processes (one all-reduce of all of them,
  in float32), and agree on skipping the step (one all-reduce of the overflow flag), so
  that every replica takes the same step or none.

With one process (or no process group) every function here does nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn


def world_size() -> int:
    """Processes in the default group; 1 without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def ignore_in_ddp(model: nn.Module, names: Sequence[str]) -> None:
    """Have a DDP wrapper built on ``model`` later skip the parameters ``names`` (qualified)."""
    if not names:
        return
    ignored = list(getattr(model, "_ddp_params_and_buffers_to_ignore", ()))
    ignored += [name for name in names if name not in ignored]
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)


def broadcast_from_first(tensors: Sequence[torch.Tensor]) -> None:
    """Overwrite ``tensors`` on every process with process 0's (in place)."""
    if world_size() == 1:
        return
    for tensor in tensors:
        dist.broadcast(tensor, src=0)


def average(tensors: Sequence[torch.Tensor]) -> None:
    """Replace each float32 tensor by its mean over the processes, with one all-reduce."""
    count = world_size()
    if count == 1 or not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    flat.div_(count)
    offset = 0
    for tensor in tensors:
        tensor.copy_(flat[offset: offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()


def any_process(flag: torch.Tensor) -> torch.Tensor:
    """0-dim bool: is ``flag`` true on any process?"""
    if world_size() == 1:
        return flag
    value = flag.to(torch.float32).reshape(1)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value[0] > 0


def max_over_processes(values: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum of ``values`` over the processes (a new tensor).

    NaN becomes +inf first: gloo's MAX with a NaN depends on the order of the operands, so
    processes could disagree on whether a step was finite; +inf is the maximum everywhere.
    """
    if world_size() == 1:
        return values
    reduced = torch.nan_to_num(values, nan=float("inf"))
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    return reduced
