"""Fully sharded data parallel training on torch's FSDP2 (`torch.distributed.fsdp.fully_shard`).

The modules, by job:

* the options: plugin.py (`FullyShardedDataParallelPlugin`, Accelerate's names), environment.py
  (the plugin that `accel launch --use_fsdp` describes), precision.py (the MixedPrecisionPolicy
  derived from the Accelerator's precision);
* sharding a model: strategy.py (`FSDPStrategy`, the Accelerator's parallelism when it has a
  plugin; accel.parallel.strategy is the interface), wrap.py (`shard_model`, which prepare runs in
  place of DistributedDataParallel: the blocks first, then the root), meta_loading.py (a model not
  every process holds whole: sharded on the meta device, then filled), optimizer.py (an optimizer
  built before sharding, pointed at the shards), sharded_model.py (full weights, the global gradient
  norm, `no_sync`);
* checkpoints: checkpoint.py (sharded save/load with torch.distributed.checkpoint, on any number of
  processes, and `consolidate`), consolidate.py (its command: one model.safetensors),
  safe_reading.py (reading those folders without running code from them; torch's own reader
  unpickles).
"""

from typing import TYPE_CHECKING

from accel._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, for type checkers (accel/_lazy.py)
    from accel.fsdp.checkpoint import consolidate as consolidate
    from accel.fsdp.checkpoint import full_optimizer_state_dict as full_optimizer_state_dict
    from accel.fsdp.checkpoint import load_full as load_full
    from accel.fsdp.checkpoint import load_sharded as load_sharded
    from accel.fsdp.checkpoint import save_sharded as save_sharded
    from accel.fsdp.checkpoint import sharded_weight_problems as sharded_weight_problems
    from accel.fsdp.optimizer import parameter_names as parameter_names
    from accel.fsdp.optimizer import retarget_optimizer as retarget_optimizer
    from accel.fsdp.plugin import CONFIG_KEYS as CONFIG_KEYS
    from accel.fsdp.plugin import FullyShardedDataParallelPlugin as FullyShardedDataParallelPlugin
    from accel.fsdp.precision import mixed_precision_policy as mixed_precision_policy
    from accel.fsdp.sharded_model import clip_grad_norm_ as clip_grad_norm_
    from accel.fsdp.sharded_model import full_state_dict as full_state_dict
    from accel.fsdp.sharded_model import is_sharded as is_sharded
    from accel.fsdp.sharded_model import no_sync as no_sync
    from accel.fsdp.wrap import modules_to_shard as modules_to_shard
    from accel.fsdp.wrap import shard_model as shard_model

_EXPORTS = {
    "consolidate": "accel.fsdp.checkpoint",
    "full_optimizer_state_dict": "accel.fsdp.checkpoint",
    "load_full": "accel.fsdp.checkpoint",
    "load_sharded": "accel.fsdp.checkpoint",
    "save_sharded": "accel.fsdp.checkpoint",
    "sharded_weight_problems": "accel.fsdp.checkpoint",
    "parameter_names": "accel.fsdp.optimizer",
    "retarget_optimizer": "accel.fsdp.optimizer",
    "CONFIG_KEYS": "accel.fsdp.plugin",
    "FullyShardedDataParallelPlugin": "accel.fsdp.plugin",
    "mixed_precision_policy": "accel.fsdp.precision",
    "clip_grad_norm_": "accel.fsdp.sharded_model",
    "full_state_dict": "accel.fsdp.sharded_model",
    "is_sharded": "accel.fsdp.sharded_model",
    "no_sync": "accel.fsdp.sharded_model",
    "modules_to_shard": "accel.fsdp.wrap",
    "shard_model": "accel.fsdp.wrap",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
