"""The MixedPrecisionPolicy that fully_shard runs with, derived from the Accelerator's precision.

FSDP2 casts each unit's gathered parameters to `param_dtype` for forward and backward and
reduce-scatters the gradients in `reduce_dtype`; the sharded parameters (what the optimizer
updates) keep their own dtype. So mixed precision keeps fp32 master weights, as without FSDP:

| mixed_precision | param_dtype | reduce_dtype | sharded weights |
|---|---|---|---|
| no | - | - | fp32 |
| bf16 | bf16 | fp32 | fp32 (autocast still runs around the model) |
| fp16 | fp16 | fp32 | fp32, with accel's loss scaler (torch's GradScaler agrees on inf/NaN across shards) |
| 16-true, bf16-true, 64-true | - | - | already in that dtype (cast before sharding) |
| fp8 | refused: FP8 under FSDP2 is not wired yet |
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

_MIXED = {"bf16": torch.bfloat16, "fp16": torch.float16}
_TRUE = ("no", "16-true", "bf16-true", "64-true")


def mixed_precision_policy(precision_name: str, given: MixedPrecisionPolicy | None) -> MixedPrecisionPolicy:
    """The policy to shard with for the canonical `precision_name`; `given` (the plugin's) wins.

    Raises ValueError for a precision FSDP2 cannot run here (FP8), naming what to do.
    """
    if precision_name in _MIXED:
        derived = MixedPrecisionPolicy(param_dtype=_MIXED[precision_name], reduce_dtype=torch.float32)
    elif precision_name in _TRUE:
        derived = MixedPrecisionPolicy()
    else:
        raise ValueError(
            f"FSDP with mixed_precision={precision_name!r} is not supported yet: the FP8 backends' layers and "
            "scaling state are not sharded by fully_shard in accel. Train with mixed_precision='bf16' under FSDP, "
            "or with FP8 under DDP (leave out the fsdp_plugin / distributed_type: FSDP)."
        )
    return derived if given is None else given
