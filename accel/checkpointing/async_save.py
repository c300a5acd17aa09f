"""save_state(async_save=True): stage the state, write and publish it in the background.

What happens before save_state returns (on the main thread, every process at the same call, so
that every collective keeps its place among the training loop's): the state is gathered as for
any save (collect), copied to CPU memory (staging.py), and the main process chooses the folder,
tidies and rotates as a blocking save does, opens the hidden work folder beside it and runs the
save pre-hooks there. The rest runs in one background thread (background.py): the files, the
manifest last, the rename that publishes the folder under its name, the rotation of old
checkpoints. Every promise of a blocking save holds: the name only ever shows a complete
checkpoint (kill -9 during the write leaves a hidden work folder, which the next save removes),
the files are weights-only, total_limit is kept. The next save_state, load_state or
end_training waits for the write and raises its error, on every process.

A sharded save (FSDP's SHARDED_STATE_DICT) is in sharded_async.py.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.checkpointing.across_processes import on_main, together
from accel.checkpointing.background import expect, outcome_key, start
from accel.checkpointing.hooks import files_saved_by_hooks
from accel.checkpointing.save import _refuse_foreign_folder, _rotate, _target, describe_run, write_files
from accel.checkpointing.staging import stage_snapshot
from accel.checkpointing.training_state import Snapshot
from accel.checkpointing.writer import move_into_place, open_work_folder

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost


def save_in_background(
    accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None, snapshot: Snapshot, main_only: bool
) -> tuple[Path, int]:
    """Stage `snapshot`, open the checkpoint's work folder and start writing it in the background;
    (the folder it will be published as, its iteration) on every process.

    Example (what `accelerator.save_state(async_save=True)` runs after collecting the state):
    `target, iteration = save_in_background(accelerator, None, collect(accelerator), False)`
    """
    if accelerator.strategy.sharded_checkpoints:
        from accel.checkpointing.sharded_async import save_shards_in_background

        return save_shards_in_background(accelerator, output_dir, snapshot)
    is_main = accelerator.process_state.is_main_process
    staged = stage_snapshot(snapshot) if is_main else snapshot  # only the main process writes
    target, iteration, automatic, temp, skip, run, token = on_main(
        accelerator, lambda: _open(accelerator, output_dir, staged, main_only), "save_state"
    )
    key = f"{outcome_key(token)}/outcome" if together(accelerator) else None
    if not is_main:
        assert key is not None  # with one process every process is the main one
        expect(target, key)
        return target, iteration
    limit = accelerator.project_configuration.total_limit

    def write() -> None:
        try:
            write_files(temp, staged, run, skip, {})
            move_into_place(temp, target)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        if automatic:
            _rotate(target.parent, limit, keep=target)

    start(target, write, key, publishes=True)
    return target, iteration


def _open(
    accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None, staged: Snapshot, main_only: bool
) -> tuple[Path, int, bool, Path, set[str], dict[str, Any], str]:
    """(folder, iteration, whether automatic, work folder, files the save hooks wrote, the manifest's
    other fields, a token naming this save) (main process): all that reads the Accelerator."""
    target, iteration, automatic = _target(accelerator, output_dir)
    _refuse_foreign_folder(target)
    if automatic:
        _rotate(target.parent, accelerator.project_configuration.total_limit)
    temp = open_work_folder(target)
    try:
        skip = files_saved_by_hooks(accelerator, staged.tensors, temp)
        run = describe_run(accelerator, staged, iteration, main_only)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return target, iteration, automatic, temp, skip, run, secrets.token_hex(8)
