"""Launched by test_sharded_publish.py: when a sharded save_state publishes, and what a restart loads.

    sharded_publish_script.py MODE ROOT

Every mode trains fsdp_save_state_script's setup (TinyNet under FSDP2, SHARDED_STATE_DICT) with
project_dir="proj", a *relative* folder: every process is given the same path by the main
process, and each resolves it from its own working directory.

* shared (2 processes): both work in ROOT/machine0 (one file system). Save, then load the
  checkpoint into a new setup; report the folder, the listing, the states and the save's timings.
* disks (2 processes): process r works in ROOT/machine<r>, as machines with their own disks at
  the same path; report each process's error and what each disk holds afterwards.
* kill (2 processes): in ROOT/machine0, save checkpoint_0, train a step, then both processes
  are killed (SIGKILL) in the second save after the manifest is written, just before the rename.
* restart (2 processes): in ROOT/machine0, load_state() with no folder, then save again.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch.distributed
from fsdp_save_state_script import build, full_state, train
from launching import report

import accel.checkpointing.save as saving

PROJECT = Path("proj")


def _listing() -> list[str]:
    return sorted(str(p) for p in PROJECT.rglob("*")) if PROJECT.exists() else []


def _timed_confirmation() -> list[float]:
    """Record the seconds the main process spends confirming the shards (visibility.py)."""
    spent: list[float] = []
    confirm = saving.confirm_visible

    def timed(*args: Any) -> list[str]:
        start = time.perf_counter()
        try:
            return confirm(*args)
        finally:
            spent.append(time.perf_counter() - start)

    saving.confirm_visible = timed  # type: ignore[assignment]
    return spent


def shared(rank: int) -> None:
    parts = build("no", PROJECT)
    train(parts, 2)
    spent = _timed_confirmation()
    start = time.perf_counter()
    folder = parts[0].save_state()
    report("save_seconds", time.perf_counter() - start)
    report("confirm_seconds", spent[0] if spent else None)
    report("saved", str(folder))
    report("at_save", full_state(parts))
    report("listing", _listing())
    parts[0].end_training()
    again = build("no", PROJECT)
    report("loaded", str(again[0].load_state()))
    report("after_load", full_state(again))


def disks(rank: int) -> None:
    parts = build("no", PROJECT)
    train(parts, 2)
    try:
        parts[0].save_state()
        report("error", None)
    except Exception as error:  # what every process raises is the point of the test
        report("error", [type(error).__name__, str(error)])
    report("listing", _listing())


def kill(rank: int) -> None:
    parts = build("no", PROJECT)
    train(parts, 2)
    parts[0].save_state()
    report("at_zero", full_state(parts))
    train(parts, 3)
    pids: list[Any] = [None, None]
    torch.distributed.all_gather_object(pids, os.getpid())
    if rank == 0:  # the whole job dies at once (a power cut), so no process tidies up

        def die(*args: Any) -> None:
            for pid in reversed(pids):
                os.kill(pid, signal.SIGKILL)

        saving.move_into_place = die  # type: ignore[assignment]
    report("killing", True)
    parts[0].save_state()


def restart(rank: int) -> None:
    report("before", _listing())
    parts = build("no", PROJECT)
    report("loaded", parts[0].load_state().name)
    report("state", full_state(parts))
    report("saved_next", parts[0].save_state().name)
    report("after", _listing())


def main() -> None:
    mode, root = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    machine = root / f"machine{rank if mode == 'disks' else 0}"
    machine.mkdir(parents=True, exist_ok=True)
    os.chdir(machine)
    {"shared": shared, "disks": disks, "kill": kill, "restart": restart}[mode](rank)


if __name__ == "__main__":
    main()
