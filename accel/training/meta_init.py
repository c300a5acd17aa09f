"""Models built on the meta device (`accelerator.init_module(empty_init=True)`, or the processes other
than 0 under `cpu_ram_efficient_loading`): finding them, and giving their tensors memory.

A meta tensor has a shape and a dtype but no storage. A model whose parameters are all on the meta
device costs no memory to build; `prepare` gives it memory: FSDP2 shards it first, so that each
process allocates only its shards (accel/fsdp/meta_loading.py); without FSDP2 `materialize` gives
the whole model memory on the device and initialises it with each module's `reset_parameters()`.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator

import torch
from torch import nn


def meta_state(model: nn.Module) -> str:
    """'real' (no parameter on the meta device), 'meta' (every parameter) or 'mixed'.

    >>> meta_state(nn.Linear(2, 2)), meta_state(nn.Linear(2, 2, device="meta"))
    ('real', 'meta')
    """
    flags = {p.is_meta for p in model.parameters()}
    if flags == {True}:
        return "meta"
    return "mixed" if True in flags else "real"


def materialize(model: nn.Module, device: torch.device) -> None:
    """Give every module with meta tensors memory on `device` and initialise it with its own
    `reset_parameters()` (what its constructor would have done, with the current random state).

    Modules with meta tensors and no `reset_parameters` (norms of some libraries, rotary caches)
    are filled with zeros, with one warning naming their classes: load real weights after
    `prepare` (`accelerator.load_state`, or `set_model_state_dict` from a full state dict).
    """
    uninitialised = []
    for module in model.modules():
        local = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        if not any(t.is_meta for t in local):
            continue
        module.to_empty(device=device, recurse=False)
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
        else:
            with torch.no_grad():
                for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
                    tensor.zero_()
            uninitialised.append(type(module).__name__)
    if uninitialised:
        warnings.warn(
            f"prepare: the model was built on the meta device (empty_init) and these modules have no "
            f"reset_parameters(), so their weights start as zeros: {', '.join(dict.fromkeys(uninitialised))}. "
            "Load the real weights after prepare: accelerator.load_state(checkpoint_dir), or "
            "torch.distributed.checkpoint.state_dict.set_model_state_dict(model, full_state_dict, "
            "options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)).",
            UserWarning,
            stacklevel=3,
        )


_TRANSFORMERS_FLAGS = {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}
"""What transformers' `from_pretrained` reads (`is_fsdp_enabled()`) to treat the processes other than
local rank 0 as receivers of process 0's weights: it skips initialising their weights and gives
their non-persistent buffers placeholders (accel sends process 0's buffers at prepare)."""


@contextlib.contextmanager
def build_on_meta(receives_weights: bool) -> Iterator[None]:
    """Parameters built inside go to the meta device (buffers stay real: they are small, and some are
    computed in the constructor, such as rotary frequencies). With `receives_weights` (a process other
    than 0 under cpu_ram_efficient_loading), transformers' flags for that case are set inside the block.

    >>> with build_on_meta(False):
    ...     layer = nn.Linear(2, 2)
    >>> layer.weight.is_meta
    True
    """
    from accel.big_modeling import init_empty_weights

    saved = {name: os.environ.get(name) for name in _TRANSFORMERS_FLAGS}
    if receives_weights:
        os.environ.update(_TRANSFORMERS_FLAGS)
    try:
        with init_empty_weights(include_buffers=False):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
