"""Accelerate's save_state / load_state pre-hooks: code of the user's that saves or loads some
models itself (diffusers' `save_pretrained` into the checkpoint folder, say).

A save hook is called as `hook(models, weights, output_dir)` on the main process, just before
the checkpoint's files are written, with `output_dir` the folder being written (it becomes the
checkpoint atomically, with the hook's files in it). Removing an entry from `weights` means "I
saved this model myself": accel does not write that model's weights. Under FSDP with
SHARDED_STATE_DICT every process writes its shards itself and `weights` is empty (as in Accelerate).
A load hook is called as `hook(models, input_dir)` on every process before anything is restored;
removing an entry from `models` means "I loaded this model myself". Entries are matched by
identity, so it does not matter which end a hook pops from.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel.checkpointing import layout

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost


def files_saved_by_hooks(
    accelerator: CheckpointHost, tensors: dict[str, dict[str, torch.Tensor]], folder: Path
) -> set[str]:
    """Run the save hooks; return the names of the weight (and gradient) files accel must not write."""
    hooks = list(accelerator.prepared.save_hooks.values())
    if not hooks:
        return set()
    present = [i for i in range(len(accelerator.prepared.models)) if layout.model_file(i) in tensors]  # none when sharded
    weights = [tensors[layout.model_file(i)] for i in present]
    for hook in hooks:
        hook(_hooks_view(accelerator), weights, str(folder))
    kept = {id(w) for w in weights}
    dropped = [i for i in present if id(tensors[layout.model_file(i)]) not in kept]
    return {name for i in dropped for name in (layout.model_file(i), layout.gradients_file(i))}


def models_loaded_by_accel(accelerator: CheckpointHost, folder: Path) -> list[int]:
    """Run the load hooks; return the indices of the prepared models accel still restores."""
    models: list[Any] = _hooks_view(accelerator)
    given = list(models)
    for hook in list(accelerator.prepared.load_hooks.values()):
        hook(models, str(folder))
    kept = {id(m) for m in models}
    return [i for i, model in enumerate(given) if id(model) in kept]


def _hooks_view(accelerator: CheckpointHost) -> list[Any]:
    """The models as hooks see them, as under Accelerate: the user's models, without the DDP or compile
    wrappers prepare put around them (diffusers' hooks call `model.save_pretrained`)."""
    return [accelerator.unwrap_model(model, keep_torch_compile=False) for model in accelerator.prepared.models]
