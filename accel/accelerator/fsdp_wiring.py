"""How the Accelerator shards a prepared model with FSDP2 (accel.fsdp) instead of wrapping it in DDP,
and keeps optimizers built before sharding pointed at the sharded parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from accel import fsdp

if TYPE_CHECKING:
    from accel.accelerator.accelerator import Accelerator


def shard(accelerator: Accelerator, model: nn.Module) -> nn.Module:
    """`model` sharded with the Accelerator's plugin; optimizers prepared earlier follow its new parameters."""
    names = fsdp.parameter_names(model)
    assert accelerator.fsdp_plugin is not None
    model = fsdp.shard_model(
        model, accelerator.fsdp_plugin, accelerator.precision.name, accelerator.device, accelerator.process_state
    )
    accelerator._fsdp_names.update(names)
    for wrapped in accelerator._optimizers:
        fsdp.retarget_optimizer(wrapped.optimizer, names, model)
    return model


def retarget(accelerator: Accelerator, optimizer: torch.optim.Optimizer) -> None:
    """Point an optimizer built before its model was sharded at the sharded parameters (no-op without FSDP)."""
    if accelerator.fsdp_plugin is None:
        return
    for model in accelerator._models:
        fsdp.retarget_optimizer(optimizer, accelerator._fsdp_names, model)


def refuse_checkpoints(accelerator: Accelerator, method: str) -> None:
    """save_state/load_state do not write or read sharded models yet: refuse rather than save wrong files."""
    if accelerator.fsdp_plugin is not None:
        raise NotImplementedError(
            f"{method} with fsdp_plugin is not supported yet: accel's checkpoints do not hold sharded models and "
            "optimizers. Save the weights with accelerator.save_model(model, folder) (every process calls it), or "
            "use accel.fsdp.save_sharded / load_sharded (torch.distributed.checkpoint) directly; see docs/fsdp.md."
        )
