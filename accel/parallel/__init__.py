"""The parallel layout: how a model and its optimizer are placed over the processes, and every strategy found here.

Where accel.distributed ends and this package begins: accel.distributed gives the processes (the process
group, each one's rank and device, the collectives, the process state); this package decides how a model
and its optimizer are laid out over them (DDP, FSDP2, HSDP, tensor parallelism, DeepSpeed, 2-D) and on
which device mesh. FSDP2's and DeepSpeed's strategies live with their engines' code
(accel.fsdp.strategy.FSDPStrategy, accel.deepspeed.strategy.DeepSpeedStrategy); the interface they implement
and the one place that chooses among them are here.

The modules, by job:

* the strategies: strategy.py (`ParallelStrategy`, the interface every strategy implements with the
  defaults of a whole model on every process; `DataParallelStrategy`, one process or DDP), choice.py
  (`create_strategy`: the one place the Accelerator's strategy is chosen, each engine imported only when
  chosen), sharded_checkpoints.py (the mixins that write and read sharded checkpoints through
  torch.distributed.checkpoint, for the strategies whose shards those are), tensor_strategy.py
  (`TensorParallelStrategy`: tensor parallelism, with FSDP2 over the data-parallel dimensions in 2-D);
* the device mesh: config.py (`ParallelismConfig`, its sizes checked at construction; torch-free, shared
  with `accel launch`), names.py (the mesh's dimension names, torch-free for the settings), layout.py (the
  config an Accelerator runs with: keyword, environment or FSDP's HYBRID_SHARD, checked against the world
  size and the FSDP plugin), mesh.py (the torch DeviceMesh with Accelerate's dimension names and
  flattened dimensions);
* long sequences: sequence/ (Ulysses, sp_backend "torch": each sequence split over the "sp" ranks, an
  all-to-all of attention heads around transformers' attention; its own package map), context.py (torch's
  context parallelism over the "cp" ranks, CUDA only; the refusal of windowed layers both share);
* tensor parallelism itself: tensor_plan.py (which layers are split, and how: the plan resolved and
  checked), tensor_parallel.py (splitting a model over the "tp" dimension, and what training needs of it
  afterwards).

Imported lazily: `accel.parallel.names` must stay torch-free for the settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.parallel.config import ParallelismConfig as ParallelismConfig

__all__ = ["ParallelismConfig"]


def __getattr__(name: str) -> Any:
    if name == "ParallelismConfig":
        from accel.parallel.config import ParallelismConfig

        return ParallelismConfig
    raise AttributeError(f"module 'accel.parallel' has no attribute {name!r}")
