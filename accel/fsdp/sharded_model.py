"""What a training loop needs from a sharded model: its full weights, a global gradient norm,
and skipping the gradient reduce-scatter on micro-batches that accumulate.

Every function here also takes an unsharded model (one process, or FSDP not used), so the
Accelerator can call them without asking first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor


def is_sharded(model: nn.Module) -> bool:
    """True when `model` was sharded by fully_shard (its parameters are DTensors)."""
    return isinstance(model, FSDPModule)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's full weights under the user's names, on the CPU, on the main process.

    Every process must call it (the shards are all-gathered); the main process gets every
    tensor, the others an empty dict (nothing is kept where nothing is written). An unsharded
    model gives its own state dict on every process.
    """
    if not is_sharded(model):
        return {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # a model's state dict holds its parameters and buffers: tensors (torch types its values more widely)
    return cast(dict[str, torch.Tensor], get_model_state_dict(model, options=options))


def clip_grad_norm_(
    parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0
) -> torch.Tensor:
    """Clip the gradients' total norm over all shards of all processes; return that norm (a plain tensor).

    torch's clip_grad_norm_ reduces DTensor gradients across the mesh itself, so the norm is the
    one the unsharded gradients have; it comes back as a replicated DTensor, made a tensor here.
    Every process must call it (the norm is all-reduced).
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(parameters)
    norm = nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


@contextlib.contextmanager
def no_sync(model: nn.Module) -> Iterator[None]:
    """Inside the block, backward accumulates unsharded gradients locally without reduce-scattering
    them (FSDP2's `set_requires_gradient_sync(False)`); the next backward outside reduces them all."""
    if not is_sharded(model):
        yield
        return
    model.set_requires_gradient_sync(False)  # type: ignore[operator]  # an FSDPModule method (is_sharded)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]  # an FSDPModule method (is_sharded)
