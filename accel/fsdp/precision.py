"""The MixedPrecisionPolicy that fully_shard runs with, derived from the Accelerator's precision.

FSDP2 casts each unit's gathered parameters to `param_dtype` for forward and backward and
reduce-scatters the gradients in `reduce_dtype`; the sharded parameters (what the optimizer
updates) keep their own dtype. So mixed precision keeps fp32 master weights, as without FSDP (a
model that arrives in 16 bits has its trainable parameters made float32 before sharding, by the
precision's `keep_masters`: accel.backends.masters):

| mixed_precision | param_dtype | reduce_dtype | sharded weights |
|---|---|---|---|
| no | - | - | fp32 |
| bf16 | bf16 | fp32 | fp32 (autocast still runs around the model) |
| fp16 | fp16 | fp32 | fp32, with accel's loss scaler (torch's GradScaler agrees on inf/NaN across shards) |
| 16-true, bf16-true, 64-true | - | - | already in that dtype (cast before sharding) |

FP8 shards as its base precision says (FP8RecipeKwargs.base_precision: bf16 by default, fp32 as `no`):
the backend's `fsdp_precision` names it, and the backend's `configure_fsdp` decides what of FP8 runs
sharded (the FP8 GEMMs; torchao's FP8 all-gather; O1/O2 storage refused) or refuses.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

_MIXED = {"bf16": torch.bfloat16, "fp16": torch.float16}
_TRUE = ("no", "16-true", "bf16-true", "64-true")


def mixed_precision_policy(precision_name: str, given: MixedPrecisionPolicy | None) -> MixedPrecisionPolicy:
    """The policy to shard with for the canonical `precision_name` (a backend's `fsdp_precision`);
    `given` (the plugin's) wins.

    Raises ValueError for a name this table does not know (an FP8 backend answers with its base).
    """
    if precision_name in _MIXED:
        derived = MixedPrecisionPolicy(param_dtype=_MIXED[precision_name], reduce_dtype=torch.float32)
    elif precision_name in _TRUE:
        derived = MixedPrecisionPolicy()
    else:
        raise ValueError(
            f"FSDP has no MixedPrecisionPolicy for precision {precision_name!r}; it knows "
            f"{', '.join(map(repr, (*_MIXED, *_TRUE)))} (an FP8 backend shards as its base precision)."
        )
    return derived if given is None else given
