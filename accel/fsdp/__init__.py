"""Fully sharded data parallel training on torch's FSDP2 (`torch.distributed.fsdp.fully_shard`).

plugin.py: FullyShardedDataParallelPlugin (Accelerate's names); environment.py: the plugin that
`accel launch --use_fsdp` describes. strategy.py: FSDPStrategy, the Accelerator's parallelism when
it has a plugin (accel.training.strategy is the interface). wrap.py: `shard_model`, which prepare
runs in place of DistributedDataParallel. sharded_model.py: full weights, the global gradient norm,
no_sync. optimizer.py: an optimizer built before sharding, pointed at the shards. precision.py: the
MixedPrecisionPolicy. checkpoint.py: sharded save/load with torch.distributed.checkpoint (any number
of processes) and `consolidate` (one model.safetensors); consolidate.py: its command.
safe_reading.py: reading those folders without running code from them (torch's own reader unpickles).
"""

from accel.fsdp.checkpoint import (
    consolidate,
    full_optimizer_state_dict,
    load_full,
    load_sharded,
    save_sharded,
    sharded_weight_problems,
)
from accel.fsdp.optimizer import parameter_names, retarget_optimizer
from accel.fsdp.plugin import CONFIG_KEYS, FullyShardedDataParallelPlugin
from accel.fsdp.precision import mixed_precision_policy
from accel.fsdp.sharded_model import clip_grad_norm_, full_state_dict, is_sharded, no_sync
from accel.fsdp.wrap import modules_to_shard, shard_model

__all__ = [
    "CONFIG_KEYS",
    "FullyShardedDataParallelPlugin",
    "clip_grad_norm_",
    "consolidate",
    "full_optimizer_state_dict",
    "full_state_dict",
    "is_sharded",
    "load_full",
    "load_sharded",
    "mixed_precision_policy",
    "modules_to_shard",
    "no_sync",
    "parameter_names",
    "retarget_optimizer",
    "save_sharded",
    "shard_model",
    "sharded_weight_problems",
]
