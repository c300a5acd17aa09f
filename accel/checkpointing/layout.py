"""The names of the files inside a checkpoint folder.

Objects of which there can be several (models, optimizers, ...) get `_1`, `_2`, ... after the
first, in the order they were prepared (Accelerate's convention). Per-process state carries the
process index, so that every process of a multi-process run writes its own file.
"""

from __future__ import annotations


def indexed(stem: str, index: int, suffix: str) -> str:
    """`stem` + `suffix` for the first object, `stem_<index>` + `suffix` for the others."""
    return f"{stem}{suffix}" if index == 0 else f"{stem}_{index}{suffix}"


def model_file(index: int) -> str:
    return indexed("model", index, ".safetensors")


def gradients_file(index: int) -> str:
    return indexed("gradients", index, ".safetensors")


def optimizer_file(index: int) -> str:
    return indexed("optimizer", index, ".pt")


def scheduler_file(index: int) -> str:
    return indexed("scheduler", index, ".pt")


def custom_file(index: int) -> str:
    return f"custom_checkpoint_{index}.pt"


def random_states_file(process_index: int) -> str:
    return f"random_states_{process_index}.pt"


def dataloaders_file(process_index: int) -> str:
    return f"dataloaders_{process_index}.pt"


PRECISION_FILE = "precision.pt"


SHARDS_DIR = "shards"
"""The subfolder of a checkpoint saved with FSDP's SHARDED_STATE_DICT: every process's shards of
the models and optimizers, written by torch.distributed.checkpoint (`.metadata`, `__<rank>_0.distcp`)."""


def model_key(index: int) -> str:
    """Model `index`'s key in the sharded checkpoint: its tensors are `<key>.<parameter name>`."""
    return indexed("model", index, "")


def optimizer_key(index: int) -> str:
    """Optimizer `index`'s key in the sharded checkpoint."""
    return indexed("optimizer", index, "")
