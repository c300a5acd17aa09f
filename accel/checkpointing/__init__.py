"""Checkpoints: save_state / load_state, written atomically, verified on loading, never pickled code.

The format is described in docs/checkpoints.md. The modules, by job:

* the flow: save.py (`save_state`: choose the folder, gather the state, write it atomically, rotate
  old checkpoints), load.py (`load_state`: find the checkpoint, verify it is whole and fits, restore
  it), training_state.py (the training state collected and checked before any file is written; a
  loaded one restored, likeliest failures first), host.py (`CheckpointHost`: what checkpointing
  reads from the Accelerator), project.py (`ProjectConfiguration`: the project's folders, automatic
  checkpoints and how many are kept), naming.py (checkpoint_<n> folders, their rotation, the hidden
  work folders), hooks.py (the user's save/load pre-hooks and the models they handle), compat.py
  (whether a checkpoint fits this run), errors.py (the errors checkpoints raise);
* several processes: across_processes.py (the main process writes, every process reads, all agree
  on the outcome), participation.py (whether every process takes part in a save, or the main
  process alone), call_site.py (whether the script called the save under an `is_main_process`
  test), visibility.py (every process's shards confirmed where the manifest says, before a sharded
  checkpoint is published);
* asynchronous writing (`save_state(async_save=True)`): async_save.py (the state staged, then
  written and published in the background), staging.py (the copy in CPU memory that training
  cannot change), background.py (the one writing thread per process, and how every process learns
  its outcome), sharded_async.py (every process's shards written in the background);
* formats: layout.py (the file names inside a checkpoint), manifest.py (manifest.json: what a
  checkpoint holds, and the check that it is whole), writer.py (atomic folders: written hidden,
  synced, renamed into place), serialization.py (file formats that run no code when loaded),
  safetensors_io.py (weights written as safetensors), model_files.py (a model's weights as
  transformers reads them: one file, or shards and an index), models.py (weights and gradients
  saved, and whether they fit a model), rng.py (the random number generators' states), sharded.py
  (an FSDP run's models and optimizers, as every process's shards or gathered), sharded_load.py
  (loading where FSDP is involved on either side);
* Accelerate's checkpoints: accelerate_files.py (the files Accelerate's `save_state` writes, each
  read without running code), from_accelerate.py (resuming a run from them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accel._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, for type checkers (accel/_lazy.py)
    from accel.checkpointing.background import finish_pending as finish_pending
    from accel.checkpointing.errors import CheckpointError as CheckpointError
    from accel.checkpointing.errors import CheckpointNotPublishedError as CheckpointNotPublishedError
    from accel.checkpointing.errors import CheckpointWriteError as CheckpointWriteError
    from accel.checkpointing.load import load_state as load_state
    from accel.checkpointing.load import open_checkpoint as open_checkpoint
    from accel.checkpointing.manifest import FORMAT_VERSION as FORMAT_VERSION
    from accel.checkpointing.manifest import Manifest as Manifest
    from accel.checkpointing.project import ProjectConfiguration as ProjectConfiguration
    from accel.checkpointing.project import resolve_project_configuration as resolve_project_configuration
    from accel.checkpointing.save import save_state as save_state

_EXPORTS = {
    "finish_pending": "accel.checkpointing.background",
    "CheckpointError": "accel.checkpointing.errors",
    "CheckpointNotPublishedError": "accel.checkpointing.errors",
    "CheckpointWriteError": "accel.checkpointing.errors",
    "load_state": "accel.checkpointing.load",
    "open_checkpoint": "accel.checkpointing.load",
    "FORMAT_VERSION": "accel.checkpointing.manifest",
    "Manifest": "accel.checkpointing.manifest",
    "ProjectConfiguration": "accel.checkpointing.project",
    "resolve_project_configuration": "accel.checkpointing.project",
    "save_state": "accel.checkpointing.save",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "check_registrable"])


def check_registrable(objects: Sequence[Any]) -> list[Any]:
    """Return `objects` if each has state_dict() and load_state_dict(), else raise ValueError
    listing every item that has not (Accelerate's exception type)."""
    bad = [
        f"Item at index {index} ({type(obj).__name__})"  # Accelerate's wording, which scripts and its tests match
        for index, obj in enumerate(objects)
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)))
    ]
    if bad:
        raise ValueError(
            f"register_for_checkpointing: {', '.join(bad)} {'has' if len(bad) == 1 else 'have'} no "
            "state_dict()/load_state_dict() methods; only such objects can be checkpointed. Register their owners, "
            "or wrap them in an object with both methods."
        )
    return list(objects)
