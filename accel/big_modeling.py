"""`init_empty_weights` and `init_on_device`: build a model without allocating its weights
(Accelerate's `accelerate.big_modeling` names).

The offloading and dispatch parts (big-model inference) are Accelerate's own, forwarded when
accelerate is installed (accel/_accelerate_names.py): `cpu_offload`, `cpu_offload_with_hook`,
`disk_offload`, `dispatch_model`, `load_checkpoint_and_dispatch`, `attach_layerwise_casting_hooks`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from accel._accelerate_names import forwarding

FORWARDED = frozenset({
    "cpu_offload", "cpu_offload_with_hook", "disk_offload", "dispatch_model", "load_checkpoint_and_dispatch",
    "attach_layerwise_casting_hooks",
})
__getattr__ = forwarding("accelerate.big_modeling", FORWARDED, __name__)


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool = False) -> Iterator[None]:
    """Create every parameter (and buffer, with `include_buffers`) built inside the block on `device`.

    With `include_buffers=True` everything goes there (torch's device context); otherwise only
    parameters move, so buffers such as position ids keep their real values on the CPU.
    """
    device = torch.device(device)
    if include_buffers:
        with device:
            yield
        return
    register = nn.Module.register_parameter

    def register_on_device(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device != device:  # one already there (a tied weight) stays shared
            module._parameters[name] = _moved_parameter(module._parameters[name], device)

    nn.Module.register_parameter = register_on_device  # type: ignore[method-assign,assignment]  # patched for the block
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]  # restored


def _moved_parameter(param: nn.Parameter | None, device: torch.device) -> nn.Parameter:
    """`param` on `device`, of its own class, with its Python attributes. A plain Parameter takes
    no keyword but requires_grad, so the attributes libraries set on it (transformers'
    `_is_hf_initialized`, ...) are copied over afterwards rather than passed to the constructor."""
    assert param is not None
    extra: dict[str, Any] = dict(param.__dict__)
    if type(param) is nn.Parameter:
        moved = nn.Parameter(param.to(device), requires_grad=param.requires_grad)
        moved.__dict__.update(extra)
        return moved
    extra["requires_grad"] = param.requires_grad
    return type(param)(param.to(device), **extra)


def init_empty_weights(include_buffers: bool = False) -> contextlib.AbstractContextManager[None]:
    """Build a model on the meta device: shapes and dtypes, no memory (load real weights afterwards,
    e.g. with `model.to_empty(device=...)` and `load_state_dict`)."""
    return init_on_device("meta", include_buffers=include_buffers)
