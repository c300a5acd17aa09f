"""Checkpoints: save_state / load_state, written atomically, verified on loading, never pickled code.

The format is described in docs/checkpoints.md. One module per job: project
(ProjectConfiguration), naming (folder names, rotation, work folders), layout (file names inside a
checkpoint), writer (atomic folders), manifest (manifest.json and verification), serialization
(safe file formats), rng (random states), models (weights and gradients), compat (does a
checkpoint fit this run), state (collect and restore), save and load (the two flows), errors;
staging, background, async_save and sharded_async write a checkpoint in the background.
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
