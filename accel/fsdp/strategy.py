"""How the Accelerator shards a prepared model with FSDP2 (accel.fsdp) instead of wrapping it in DDP,
and keeps optimizers built before sharding pointed at the sharded parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from accel import fsdp
from accel.training import model as model_utils

if TYPE_CHECKING:
    from accel.accelerator.accelerator import Accelerator


def parameter_names(accelerator: Accelerator, model: nn.Module) -> dict[int, str]:
    """id(parameter) -> name for the model about to be prepared (empty without FSDP).

    Taken before the precision converts the model: a backend may replace Parameters (torchao's FP8
    all-gather wraps each weight in a new one), and an optimizer built before prepare still holds
    the originals; `shard` points it at the sharded parameters of the same names.
    """
    if accelerator.fsdp_plugin is None:
        return {}
    return fsdp.parameter_names(model_utils.unwrap_model(model))


def shard(accelerator: Accelerator, model: nn.Module, names: dict[int, str]) -> nn.Module:
    """`model` sharded with the Accelerator's plugin; optimizers prepared earlier follow its new parameters
    (found by `names`, taken before conversion, and by the names of the converted model)."""
    names = {**names, **fsdp.parameter_names(model)}
    assert accelerator.fsdp_plugin is not None
    precision = accelerator.precision.fsdp_precision
    model = fsdp.shard_model(model, accelerator.fsdp_plugin, precision, accelerator.device, accelerator.process_state)
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
