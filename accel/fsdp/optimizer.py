"""Pointing an optimizer built before sharding at the sharded parameters.

fully_shard replaces each parameter with a new DTensor parameter holding this process's shard.
An optimizer built before `prepare` (the usual Accelerate script) still lists the old, full
parameters and would train nothing; Accelerate swaps them too (`fsdp2_switch_optimizer_parameters`).
Parameters are matched by name, taken before sharding.
"""

from __future__ import annotations

import torch
from torch import nn


def parameter_names(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> its name in `model`; take it before sharding."""
    return {id(parameter): name for name, parameter in model.named_parameters(remove_duplicate=False)}


def retarget_optimizer(optimizer: torch.optim.Optimizer, names: dict[int, str], model: nn.Module) -> int:
    """Replace, in `optimizer`'s groups, each parameter named in `names` by `model`'s sharded one; return how many.

    Parameters the optimizer holds that `names` does not know (already sharded ones, other
    tensors) stay. Raises ValueError when the optimizer already has state for a replaced
    parameter: that state has the full shape, and the shards cannot use it.
    """
    sharded = dict(model.named_parameters(remove_duplicate=False))
    replaced = 0
    for group in optimizer.param_groups:
        for index, parameter in enumerate(group["params"]):
            name = names.get(id(parameter))
            if name is None or sharded.get(name) is parameter:
                continue
            if optimizer.state.get(parameter):
                raise ValueError(
                    f"prepare: the optimizer already has state (it has stepped) for parameter {name!r}, which FSDP "
                    "now shards; that state has the full shape and cannot be sharded here. Prepare the model and the "
                    "optimizer before the first optimizer step, or load the state afterwards with load_state."
                )
            group["params"][index] = sharded[name]
            replaced += 1
    return replaced
