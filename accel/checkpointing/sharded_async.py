"""An asynchronous sharded save: every process writes its shards in the background, the main
process publishes the checkpoint once it has heard from every one.

torch.distributed.checkpoint's save is three steps: a plan (every process's local plan gathered,
the global plan and the checkpoint's index made by the coordinator, each plan sent back: two
collectives), the write of each process's own files (no collective), and the index written by
the coordinator with what every process wrote (one more collective). Here the plan runs on the
main thread before save_state returns, among the training loop's collectives and in the same
order on every process; the copies of the shards it writes are staged in CPU memory. Each
process then writes its files, with their sizes and checksums, in its background thread and
reports them through the store (background.py), which is no collective. The main process's
thread waits for every report, writes the index (`shards/.metadata`), confirms each process's
files are visible in its work folder (visibility.py), writes the other files and the manifest
last, and renames the folder into place, as a blocking save does. A process that fails reports
its error, one that dies reports nothing: either way nothing is published, the work folder is
removed, and every process raises the error at its next call.
"""

from __future__ import annotations

import os
import pickle
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.checkpoint.storage import WriteResult

from accel.checkpointing import layout
from accel.checkpointing.across_processes import _rebuild, agree_all, on_main, together
from accel.checkpointing.background import forget, group_store, outcome_key, run_and_report, start, take
from accel.checkpointing.manifest import FileEntry, describe_file
from accel.checkpointing.save import _open, _rotate, describe_run, write_files
from accel.checkpointing.sharded import _RecordingWriter, by_name_state, owner
from accel.checkpointing.staging import stage_sharded, stage_snapshot
from accel.checkpointing.training_state import Snapshot
from accel.checkpointing.visibility import confirm_visible
from accel.checkpointing.writer import move_into_place
from accel.fsdp.checkpoint import METADATA_NAME

if TYPE_CHECKING:
    import torch.distributed as dist

    from accel.checkpointing.host import CheckpointHost

Written = tuple[list[WriteResult], dict[str, FileEntry]]
"""What one process wrote: torch's write results (for the index) and its files (`shards/<name>`)."""


def save_shards_in_background(
    accelerator: CheckpointHost, output_dir: str | os.PathLike[str] | None, snapshot: Snapshot
) -> tuple[Path, int]:
    """Plan and stage every process's shards, then write them and publish the checkpoint in the
    background; (the folder it will be published as, its iteration) on every process."""
    state = accelerator.process_state
    staged = stage_snapshot(snapshot) if state.is_main_process else snapshot
    target, iteration, automatic, temp, token = on_main(
        accelerator, lambda: (*_open(accelerator, output_dir), secrets.token_hex(8)), "save_state"
    )
    shards = temp / layout.SHARDS_DIR
    writer = _RecordingWriter(shards)
    planner = DefaultSavePlanner()
    try:
        plans = agree_all(accelerator, lambda: _local_plan(accelerator, planner, writer), "save_state")
        central, metadata = on_main(accelerator, lambda: _global_plan(planner, writer, plans), "save_state")
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)  # every process: on disks of their own, each has its copy
        raise
    plan = central[state.process_index]
    key = outcome_key(token)
    several = together(accelerator)
    store = group_store() if several else None  # the threads' (see background.py)
    if not state.is_main_process:
        assert store is not None  # with one process every process is the main one
        body = run_and_report(store, f"{key}/{state.process_index}", lambda: _write_own(planner, writer, plan, shards))
        start(target, body, f"{key}/outcome", publishes=False)
        return target, iteration
    run = describe_run(accelerator, staged, iteration, False)
    limit = accelerator.project_configuration.total_limit
    others = [(store, rank) for rank in range(1, state.num_processes) if store is not None]  # (their store, rank)

    def publish() -> None:
        try:
            written = [_write_own(planner, writer, plan, shards), *(_report_of(on, key, rank) for on, rank in others)]
            writer.finish(metadata=metadata, results=[results for results, _ in written])
            index = f"{layout.SHARDS_DIR}/{METADATA_NAME}"
            files = [{name: entry.size for name, entry in entries.items()} for _, entries in written]
            files[0][index] = (temp / index).stat().st_size
            confirm_visible(temp, files, target)
            entries = {name: entry for _, part in written for name, entry in part.items()}
            write_files(temp, staged, run, set(), {**entries, index: describe_file(temp / index)})
            move_into_place(temp, target)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        if automatic:
            _rotate(target.parent, limit, keep=target)

    start(target, publish, f"{key}/outcome" if several else None, publishes=True)
    return target, iteration


def _local_plan(accelerator: CheckpointHost, planner: DefaultSavePlanner, writer: _RecordingWriter) -> SavePlan:
    """This process's shards of every prepared model and optimizer, staged in CPU memory and set up
    in `planner`; returns its local plan (torch's local step of a save)."""
    state: dict[str, Any] = {
        layout.model_key(i): get_model_state_dict(accelerator.unwrap_model(m, keep_torch_compile=False))
        for i, m in enumerate(accelerator.prepared.models)
    }
    for index, wrapped in enumerate(accelerator.prepared.optimizers):
        state[layout.optimizer_key(index)] = by_name_state(owner(accelerator, index), wrapped.optimizer)
    coordinator = accelerator.process_state.is_main_process
    planner.set_up_planner(state_dict=stage_sharded(state), storage_meta=writer.storage_meta(), is_coordinator=coordinator)
    writer.set_up_storage_writer(coordinator, rank=accelerator.process_state.process_index, use_collectives=True)
    return writer.prepare_local_plan(planner.create_local_plan())


def _global_plan(
    planner: DefaultSavePlanner, writer: _RecordingWriter, plans: list[SavePlan]
) -> tuple[list[SavePlan], Metadata]:
    """Every process's final plan and the checkpoint's index (the coordinator's global step)."""
    plans, metadata = planner.create_global_plan(plans)
    return writer.prepare_global_plan(plans), metadata


def _write_own(planner: DefaultSavePlanner, writer: _RecordingWriter, plan: SavePlan, folder: Path) -> Written:
    """Write this process's files (background thread); its write results and `shards/<name>` entries."""
    done = writer.write_data(planner.finish_plan(plan), planner)
    done.wait()
    results = done.value()
    names = sorted({result.storage_data.relative_path for result in results})
    return results, {f"{layout.SHARDS_DIR}/{name}": describe_file(folder / name) for name in names}


def _report_of(store: dist.Store, key: str, rank: int) -> Written:
    """What process `rank` wrote, as it reported it in `store`; its error, raised, if it failed."""
    outcome = pickle.loads(take(store, f"{key}/{rank}", f"process {rank}'s shards"))
    forget(store, f"{key}/{rank}")
    if outcome[0] != "ok":
        raise _rebuild(outcome, f"writing its shards failed on process {rank}")
    written: Written = outcome[1]
    return written

