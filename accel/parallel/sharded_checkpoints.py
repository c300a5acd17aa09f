"""The shard methods of the strategies whose sharded checkpoints are torch.distributed.checkpoint's.

A sharded checkpoint keeps its models and optimizers in `shards/`, each process's part written by
accel.checkpointing.sharded and read back by accel.checkpointing.sharded_load, onto any layout. Two mixins
give a strategy those methods of the ParallelStrategy interface:

* `ShardReadingMixin`: `shard_problems`, `read_shards`, `apply_shards`. DataParallelStrategy has it
  (the shards of an FSDP2 or tensor-parallel run load into whole models), and so do the two below.
* `ShardedCheckpointsMixin`: the above and `write_shards`, for the strategies that write such shards:
  FSDPStrategy (under SHARDED_STATE_DICT) and TensorParallelStrategy.

DeepSpeedStrategy has neither: its checkpoints are the engine's ZeRO files (accel.deepspeed.checkpoint),
which these methods refuse, as that module says why. The torch.distributed.checkpoint code is imported
when a method runs, never with the strategy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from accel.checkpointing.host import CheckpointHost
    from accel.checkpointing.manifest import Manifest


class ShardReadingMixin:
    """Loading a sharded checkpoint written with torch.distributed.checkpoint (FSDP2's or tensor parallelism's)."""

    def shard_problems(
        self, accelerator: CheckpointHost, folder: Path, manifest: Manifest, models: list[int], label: str
    ) -> list[str]:
        """What keeps a sharded checkpoint's shards from loading here (raises for unreadable files):
        shards DeepSpeed wrote, shard files the manifest does not list, weights of other names or shapes."""
        from accel.checkpointing.sharded_load import check_shard_files, shape_problems
        from accel.deepspeed.checkpoint import problems_without_engine

        refused = problems_without_engine(manifest)
        if refused:
            return refused
        check_shard_files(folder, manifest, label)
        return shape_problems(accelerator, folder, models, label)

    def read_shards(self, accelerator: CheckpointHost, folder: Path, models: list[int], label: str) -> dict[str, Any]:
        """This process's shards, read (collectively) before anything is changed."""
        from accel.checkpointing.sharded_load import read_shards

        return read_shards(accelerator, folder, models, label)

    def apply_shards(self, accelerator: CheckpointHost, state: dict[str, Any], models: list[int]) -> None:
        """Put what `read_shards` read into the models and optimizers."""
        from accel.checkpointing.sharded_load import apply_shards

        apply_shards(accelerator, state, models)


class ShardedCheckpointsMixin(ShardReadingMixin):
    """Writing and loading sharded checkpoints with torch.distributed.checkpoint (FSDPStrategy, TensorParallelStrategy)."""

    def write_shards(self, accelerator: CheckpointHost, folder: Path) -> dict[str, int]:
        """Every process writes its shards into `folder/shards`; returns the files it wrote and their sizes."""
        from accel.checkpointing.sharded import write_shards

        return write_shards(accelerator, folder)
