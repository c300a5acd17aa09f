"""What a training loop needs from a sharded model: its full weights (also where a transformers model's own
`save_pretrained` reads them), a global gradient norm, and skipping the gradient reduce-scatter on
micro-batches that accumulate.

Every function here also takes an unsharded model (one process, or FSDP not used), so the
Accelerator can call them without asking first.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator
from typing import Any, cast

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


def gather_when_saved(model: nn.Module) -> None:
    """Make a sharded transformers model's `save_pretrained(folder)` write its full weights.

    Called on every process, as scripts do (Accelerate's nd_parallel.py example ends so), transformers reads
    the model's state dict, whose DTensor shards safetensors cannot write ("Attempted to access the data pointer
    on an invalid python storage": under Accelerate too). Here the call gathers the full weights first (every
    process takes part; the main one writes them, as transformers already decides). A call that passes its own
    `state_dict` (Accelerate's documented `state_dict=accelerator.get_state_dict(model)`) is unchanged. A model
    without `save_pretrained` is left alone.

    Args:
        model: The model fully_shard sharded.
    """
    original = getattr(model, "save_pretrained", None)
    if not is_sharded(model) or not callable(original):
        return

    @functools.wraps(original)
    def save_pretrained(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 3 and kwargs.get("state_dict") is None:  # (folder, is_main_process, state_dict, ...)
            kwargs["state_dict"] = full_state_dict(model)
        return original(*args, **kwargs)

    model.__dict__["save_pretrained"] = save_pretrained  # an instance attribute, as a bound method would be


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
