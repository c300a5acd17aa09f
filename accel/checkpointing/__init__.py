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
from typing import Any

from accel.checkpointing.background import finish_pending
from accel.checkpointing.errors import CheckpointError, CheckpointNotPublishedError, CheckpointWriteError
from accel.checkpointing.load import load_state, open_checkpoint
from accel.checkpointing.manifest import FORMAT_VERSION, Manifest
from accel.checkpointing.project import ProjectConfiguration, resolve_project_configuration
from accel.checkpointing.save import save_state

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointNotPublishedError",
    "CheckpointWriteError",
    "Manifest",
    "ProjectConfiguration",
    "check_registrable",
    "finish_pending",
    "load_state",
    "open_checkpoint",
    "resolve_project_configuration",
    "save_state",
]


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
