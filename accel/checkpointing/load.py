"""load_state: find the checkpoint, verify it is whole and fits, then restore it."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from accel.checkpointing.accelerate_files import is_accelerate_checkpoint
from accel.checkpointing.across_processes import agree, on_main
from accel.checkpointing.background import finish_pending
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.from_accelerate import load_accelerate_state
from accel.checkpointing.hooks import models_loaded_by_accel
from accel.checkpointing.manifest import MANIFEST_NAME, Manifest, read_manifest, verify_files
from accel.checkpointing.naming import leftover_of, numbered_checkpoints
from accel.checkpointing.project import check_folder
from accel.checkpointing.training_state import apply, stage

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

def load_state(accelerator: CheckpointHost, input_dir: str | os.PathLike[str] | None) -> Path:
    """Restore the checkpoint in `input_dir`, or the project's newest one; return its folder.

    With several processes, every process must call it: the main process picks the folder, every
    process reads it (on several machines it must be on a shared filesystem, or copied to the same
    path on each), and if any process cannot, every process raises.
    """
    finish_pending("load_state")  # an asynchronous save under way: published (or its error raised) first
    folder = on_main(accelerator, lambda: _source(accelerator, input_dir), "load_state")
    label = f"load_state: checkpoint {str(folder)!r}"
    if not (folder / MANIFEST_NAME).exists() and is_accelerate_checkpoint(folder):
        load_accelerate_state(accelerator, folder, label)
        return folder
    verify = accelerator.process_state.is_local_main_process  # one check of the files per machine
    manifest = agree(accelerator, lambda: open_checkpoint(folder, label, verify=verify), "load_state")
    models = models_loaded_by_accel(accelerator, folder)
    staged = agree(accelerator, lambda: stage(accelerator, folder, manifest, label, models), "load_state")
    shards = None  # read only once every process has staged the rest: torch's reading is collective
    if staged.sharded:
        shards = agree(accelerator, lambda: accelerator.strategy.read_shards(accelerator, folder, models, label), "load_state")
    apply(accelerator, staged, label, shards)
    accelerator.project_configuration.iteration = max(accelerator.project_configuration.iteration, manifest.iteration + 1)
    return folder


def open_checkpoint(folder: Path, label: str, verify: bool = True) -> Manifest:
    """The manifest of the checkpoint in `folder`, after checking every file against it (if `verify`)."""
    if not folder.exists():
        leftover = leftover_of(folder)
        hint = (
            f" An interrupted save left its previous version at {str(leftover)!r}: rename that folder to "
            f"{folder.name!r} to load it."
            if leftover is not None
            else ""
        )
        raise FileNotFoundError(f"{label}: no such folder.{hint}")
    if not folder.is_dir():
        raise CheckpointError(f"{label}: that path is a file, not a checkpoint folder.")
    if not (folder / MANIFEST_NAME).is_file():
        raise CheckpointError(f"{label}: not an accel checkpoint, it has no {MANIFEST_NAME}. {_what_it_is(folder)}")
    manifest = read_manifest(folder, label)
    if verify:
        verify_files(folder, manifest, label)
    return manifest


def _source(accelerator: CheckpointHost, input_dir: str | os.PathLike[str] | None) -> Path:
    """The folder to load: `input_dir`, else the newest automatic checkpoint that has a manifest."""
    if input_dir is not None:
        return check_folder("load_state(input_dir)", input_dir)
    checkpoints = accelerator.project_configuration.checkpoints_dir
    if checkpoints is None:
        raise ValueError(
            "load_state() got no input_dir, and the Accelerator has no project_dir to find checkpoints in. "
            "Pass the checkpoint's folder, load_state('path/to/checkpoint'), or create the Accelerator with "
            "project_dir= the folder given when saving."
        )
    for _, folder in reversed(numbered_checkpoints(checkpoints)):
        if (folder / MANIFEST_NAME).is_file() or is_accelerate_checkpoint(folder):
            return folder
        warnings.warn(
            f"load_state: skipping {str(folder)!r}: it has no {MANIFEST_NAME}, so it is not a complete accel "
            "checkpoint (nor one of Accelerate's).",
            UserWarning,
            stacklevel=4,
        )
    raise FileNotFoundError(
        f"load_state: there is no checkpoint in {str(checkpoints)!r} yet. Call save_state() first, or pass the "
        "folder of a checkpoint."
    )


def _what_it_is(folder: Path) -> str:
    names = sorted(entry.name for entry in folder.iterdir())
    if not names:
        return "The folder is empty."
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"It holds {shown}."
