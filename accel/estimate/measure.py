"""What one rank holds now: the bytes of its parameters, gradients and optimizer state, measured.

The estimate (training.py) is checked against this on real runs; a user can call it too, after a
step, to see where a rank's memory went.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from accel.accelerator import Accelerator


@dataclass(frozen=True)
class HeldBytes:
    """Bytes one rank holds, by kind; each storage counted once (tied weights, views)."""

    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        """The three together."""
        return self.parameters + self.gradients + self.optimizer


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2, TP), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def storage_bytes(tensors: Iterable[torch.Tensor], seen: set[tuple[str, int]] | None = None) -> int:
    """Bytes of the storages under `tensors`, each counted once (views, tied weights, a flat buffer's
    parts); a DTensor counts its local shard. `seen` carries the storages counted across calls.

    A tensor subclass without one storage counts its elements' bytes.
    """
    seen = set() if seen is None else seen
    total = 0
    for tensor in tensors:
        local = _local(tensor)
        try:
            storage = local.untyped_storage()
            key, size = (str(local.device), storage.data_ptr()), storage.nbytes()
        except (RuntimeError, NotImplementedError, TypeError):  # tensor subclasses without one storage
            key, size = (str(local.device), id(local)), local.numel() * local.element_size()
        if key not in seen and size:
            seen.add(key)
            total += size
    return total


def held_bytes(
    model: nn.Module, optimizers: Iterable[torch.optim.Optimizer] = (), accelerator: Accelerator | None = None
) -> HeldBytes:
    """The bytes of `model`'s parameters, their gradients and the optimizers' state, on this rank.

    Counts whole storages (an FSDP2 shard's padding included), each once; bitsandbytes' quant state (block
    scales, code tables, int8 row scales) with the parameters.

    Args:
        model: the (prepared) model whose parameters and gradients are counted.
        optimizers: the optimizers whose state tensors are counted (after a step: state is made lazily).
        accelerator: the Accelerator that prepared them: what its precision holds outside the parameters
            is counted too (native FP8 O1/O2: the FP8 gradients and the float16 weights' scales).

    Example:
        >>> held = held_bytes(model, [optimizer], accelerator)  # doctest: +SKIP
        >>> held.parameters, held.gradients, held.optimizer  # doctest: +SKIP
    """
    from accel.quantization.sharding import quant_state_tensors

    seen: set[tuple[str, int]] = set()
    parameters = list(model.parameters())
    extra = accelerator.precision.held_tensors() if accelerator is not None else {}
    return HeldBytes(
        parameters=storage_bytes([*parameters, *extra.get("parameters", []), *quant_state_tensors(model)], seen),
        gradients=storage_bytes([*(p.grad for p in parameters if p.grad is not None), *extra.get("gradients", [])],
                                 seen),
        optimizer=storage_bytes((value for optimizer in optimizers for state in optimizer.state.values()
                                  for value in state.values() if isinstance(value, torch.Tensor)), seen),
    )
