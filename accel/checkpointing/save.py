"""save_state: choose the folder, gather the state, write it atomically, rotate old checkpoints."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel._version import __version__
from accel.checkpointing.across_processes import agree_all, alone, on_main
from accel.checkpointing.background import finish_pending
from accel.checkpointing.call_site import refuse_main_only
from accel.checkpointing.compat import fp8_setup
from accel.checkpointing.hooks import files_saved_by_hooks
from accel.checkpointing.manifest import FORMAT, MANIFEST_NAME, FileEntry, Manifest, describe_file
from accel.checkpointing.naming import next_number, numbered_name, to_rotate_out
from accel.checkpointing.participation import GRACE_SECONDS, late_folder, participants, publish_result
from accel.checkpointing.project import check_folder
from accel.checkpointing.safetensors_io import require_safetensors_writer
from accel.checkpointing.serialization import save_tensors, save_torch
from accel.checkpointing.training_state import Snapshot, collect
from accel.checkpointing.visibility import confirm_visible
from accel.checkpointing.writer import (
    move_into_place,
    open_work_folder,
    publish_folder,
    remove_folder,
    write_file,
)

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost


def save_state(
    accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None, async_save: bool = False
) -> Path:
    """Write a checkpoint to `output_dir`, or to the next `checkpoint_<n>` of the project; return it.

    With several processes, every process must call it: all take part in gathering the state,
    the main process alone writes, and every process returns its folder (or raises its error).
    With `async_save`, the state is copied to CPU memory and written in the background
    (async_save.py): it returns the folder the checkpoint will have once published.
    """
    finish_pending("save_state")  # the previous asynchronous save: done, or its error raised here
    require_safetensors_writer("save_state")  # an ImportError is itself, never a disk-space error
    strategy = accelerator.strategy
    if strategy.sharded_checkpoints or strategy.shards_parameters:
        refuse_main_only(accelerator, "save_state")
        who, session = "all", 0  # every process must come: a collective save, as before
    else:
        who, session = participants(accelerator)
    if who == "late":
        return _late(session)
    with alone() if who == "main" else contextlib.nullcontext():
        snapshot = collect(accelerator)
        if async_save:
            from accel.checkpointing.async_save import save_in_background  # it builds on this module

            target, iteration = save_in_background(accelerator, output_dir, snapshot, who == "main")
        elif strategy.sharded_checkpoints:
            target, iteration = _publish_sharded(accelerator, output_dir, snapshot)
        else:
            target, iteration = on_main(
                accelerator, lambda: _publish(accelerator, output_dir, snapshot, who == "main"), "save_state"
            )
    if who == "main":
        publish_result(session, str(target))
    accelerator.project_configuration.iteration = iteration + 1
    return target


def _late(session: int) -> Path:
    """A process that called save_state after the main process had saved without it: the main process's folder."""
    folder = Path(late_folder(session))
    warnings.warn(
        f"save_state: this process called save_state more than {GRACE_SECONDS:g} s after the main process, which "
        f"saved {str(folder)!r} without this process's RNG states and dataloader position.",
        UserWarning,
        stacklevel=3,
    )
    return folder


def _publish(
    accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None, snapshot: Snapshot, main_only: bool = False
) -> tuple[Path, int]:
    """Choose the folder, write the snapshot there atomically and rotate old checkpoints (main process)."""
    target, iteration, automatic = _target(accelerator, output_dir)
    _refuse_foreign_folder(target)
    limit = accelerator.project_configuration.total_limit
    if automatic:
        _rotate(target.parent, limit)  # what a save killed before its rotation left behind
    publish_folder(target, lambda folder: _write(folder, snapshot, accelerator, iteration, main_only))
    if automatic:
        _rotate(target.parent, limit, keep=target)
    return target, iteration


def _publish_sharded(
    accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None, snapshot: Snapshot
) -> tuple[Path, int]:
    """As `_publish`, with every process writing its shards into the main process's hidden work
    folder and reporting them; the main process confirms it sees each of them there
    (visibility.py) before it adds the rest and renames the folder. A process that fails or dies
    midway, or shards the main process cannot see, leave only that hidden folder (removed here,
    on every process, or by the next save once its writer is dead)."""
    target, iteration, automatic, temp = on_main(accelerator, lambda: _open(accelerator, output_dir), "save_state")
    try:
        written = agree_all(accelerator, lambda: accelerator.strategy.write_shards(accelerator, temp), "save_state")
        on_main(
            accelerator, lambda: _finish(accelerator, snapshot, iteration, temp, target, automatic, written), "save_state"
        )
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)  # every process: on disks of their own, each has its copy
        raise
    return target, iteration


def _finish(
    accelerator: CheckpointHost,
    snapshot: Snapshot,
    iteration: int,
    temp: Path,
    target: Path,
    automatic: bool,
    written: list[dict[str, int]],
) -> None:
    """Confirm every process's files are in the work folder `temp`, add the other files and the
    manifest, rename it to `target` and rotate old automatic checkpoints (main process)."""
    shards = confirm_visible(temp, written, target)
    _write(temp, snapshot, accelerator, iteration, shards=shards)
    move_into_place(temp, target)
    if automatic:
        _rotate(target.parent, accelerator.project_configuration.total_limit, keep=target)


def _open(accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None) -> tuple[Path, int, bool, Path]:
    """(folder, iteration, whether automatic, the hidden work folder created beside it) (main process)."""
    target, iteration, automatic = _target(accelerator, output_dir)
    _refuse_foreign_folder(target)
    if automatic:
        _rotate(target.parent, accelerator.project_configuration.total_limit)
    return target, iteration, automatic, open_work_folder(target)


def _target(accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None) -> tuple[Path, int, bool]:
    """(folder, iteration, whether it is an automatic checkpoint)."""
    if output_dir is not None:
        return check_folder("save_state(output_dir)", output_dir), accelerator.project_configuration.iteration, False
    config = accelerator.project_configuration
    if config.checkpoints_dir is None or not config.automatic_checkpoint_naming:
        reason = "no project_dir" if config.checkpoints_dir is None else "automatic_checkpoint_naming=False"
        raise ValueError(
            f"save_state() got no output_dir, and the Accelerator has {reason}, so there is nowhere to save. "
            "Pass a folder, save_state('path/to/checkpoint'), or create the Accelerator with "
            "project_dir='path/to/project' to write project_dir/checkpoints/checkpoint_<n> automatically."
        )
    number = next_number(config.checkpoints_dir, accelerator.project_configuration.iteration)
    return config.checkpoints_dir / numbered_name(number), number, True


def _refuse_foreign_folder(target: Path) -> None:
    """Refuse a target that is a file, or a folder holding files other than an accel checkpoint."""
    if target.exists() and not target.is_dir():
        raise FileExistsError(
            f"save_state(output_dir={str(target)!r}): that path is a file, not a folder. Choose another path."
        )
    if not target.is_dir() or not any(target.iterdir()) or _is_checkpoint(target):
        return
    names = sorted(entry.name for entry in target.iterdir())
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise FileExistsError(
        f"save_state(output_dir={str(target)!r}): that folder exists and is not an accel checkpoint (it holds "
        f"{shown}). save_state replaces only checkpoints, and will not mix its files with others or delete "
        "them. Choose a new folder, or empty this one."
    )


def _is_checkpoint(folder: Path) -> bool:
    try:
        return json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _write(
    folder: Path,
    snapshot: Snapshot,
    accelerator: CheckpointHost,
    iteration: int,
    main_only: bool = False,
    shards: list[str] | None = None,
) -> None:
    """Write every file into `folder`, the manifest (with sizes and checksums) last; `shards`: the
    files the processes wrote there already (confirmed), listed in the manifest too.

    Save pre-hooks run first; the weights of the models they saved themselves are not written.
    """
    by_hooks = files_saved_by_hooks(accelerator, snapshot.tensors, folder)
    run = describe_run(accelerator, snapshot, iteration, main_only)
    write_files(folder, snapshot, run, by_hooks, {name: describe_file(folder / name) for name in shards or []})


def describe_run(accelerator: CheckpointHost, snapshot: Snapshot, iteration: int, main_only: bool) -> dict[str, Any]:
    """The manifest's fields other than its files: read from the Accelerator when the save starts."""
    return {
        "accel_version": __version__,
        "iteration": iteration,
        "precision": accelerator.precision.name,
        "fp8": fp8_setup(accelerator),
        "num_processes": accelerator.process_state.num_processes,
        "gradient_accumulation": snapshot.gradient_accumulation,
        "contents": snapshot.contents,
        "dataloaders": snapshot.dataloaders,
        "fsdp": accelerator.strategy.checkpoint_record(),
        "process_states": [0] if main_only and accelerator.process_state.distributed else None,
    }


def write_files(
    folder: Path, snapshot: Snapshot, run: dict[str, Any], skip: set[str], shards: dict[str, FileEntry]
) -> None:
    """Write the snapshot's files into `folder` (but those in `skip`, which save hooks wrote), then
    the manifest listing them and the already written `shards`. Reads nothing from the Accelerator:
    an asynchronous save runs it in its background thread."""
    tensor_files = [name for name in snapshot.tensors if name not in skip]
    for name in tensor_files:
        save_tensors(snapshot.tensors[name], folder / name)
    for name, value in snapshot.objects.items():
        save_torch(value, folder / name)
    files = {name: describe_file(folder / name) for name in [*tensor_files, *snapshot.objects]}
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    manifest = Manifest(**run, created=created, files={**files, **shards})
    text = manifest.to_json().encode("utf-8")
    write_file(folder / MANIFEST_NAME, lambda file: file.write(text))


def _rotate(folder: Path, total_limit: int | None, keep: Path | None = None) -> None:
    """Delete the oldest automatic checkpoints in `folder` beyond `total_limit`, never the newest."""
    for old in to_rotate_out(folder, total_limit, keep):
        try:
            remove_folder(old)
        except OSError as exc:
            warnings.warn(
                f"save_state: could not delete the old checkpoint {str(old)!r} to keep total_limit={total_limit} "
                f"({exc.strerror or exc}); it is left in place.",
                UserWarning,
                stacklevel=3,
            )
