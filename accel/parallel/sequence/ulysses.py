"""SequenceParallel: sequence parallelism (Ulysses, torch backend) for one Accelerator, over the mesh's "sp" dimension.

Prepare hands it each model (`prepare_model`: the attention exchange and the loss hooks) and each
dataloader's batches (`shard_batch`: this rank's slice of the sequence). The sequence ranks share a
data-parallel place, so they get the same batches; the model is replicated over them (DDP) or sharded over
them with the data-parallel ranks (FSDP2's dp_shard_cp dimension), and either reduction averages the
gradients over them too.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from accel.parallel.sequence.attention import check_model, mark
from accel.parallel.sequence.batches import shard_sequence
from accel.parallel.sequence.loss import SequenceLoss


class SequenceParallel:
    """The sequence-parallel group of this process and what it does to models and batches.

    Args:
        group: The "sp" dimension's process group.
        rank: This process's rank in it.
        ranks: Its size (sp_size).

    Example:
        ```python
        accelerator = Accelerator(parallelism_config=ParallelismConfig(sp_size=2))  # 2 processes
        model, loader = accelerator.prepare(model, loader)  # accelerator.sequence_parallel did both
        loss = model(**next(iter(loader))).loss             # the whole sequence's loss, on both ranks
        ```
    """

    def __init__(self, group: Any, rank: int, ranks: int) -> None:
        self.group, self.rank, self.ranks = group, rank, ranks

    @classmethod
    def from_mesh(cls, mesh: Any) -> SequenceParallel:
        """The group of the mesh's "sp" dimension.

        Args:
            mesh: The Accelerator's DeviceMesh (with an "sp" dimension).
        """
        return cls(mesh.get_group("sp"), int(mesh.get_local_rank("sp")), int(mesh.size(mesh.mesh_dim_names.index("sp"))))

    def prepare_model(self, model: nn.Module) -> None:
        """Make `model` attend over the group and return the whole sequence's loss (checked first: attention.py).

        Args:
            model: The transformers model given to prepare, before it is wrapped.
        """
        text = check_model(model, self.ranks)
        mark(model, self.group, self.ranks)
        vocab = getattr(model.config, "vocab_size", None) or getattr(text, "vocab_size", None)
        SequenceLoss(self.group, self.ranks, vocab).attach(model)

    def shard_batch(self, batch: Any) -> dict[str, Any]:
        """This rank's slice of `batch` (batches.py).

        Args:
            batch: A batch of a prepared dataloader.
        """
        return shard_sequence(batch, self.rank, self.ranks)
