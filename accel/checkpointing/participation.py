"""Which processes take part in a save_state: every process, or the main process alone.

Accelerate lets a script save inside `if accelerator.is_main_process:` (diffusers' and peft's
scripts do): under DDP every process holds the same weights. accel's save gathers every
process's RNG states and dataloader position, which takes every process; a collective entered by
the main process alone would wait forever (or meet the other processes' next collective). So
before any collective, the processes meet in the process group's key-value store, which waits
for no one:

* the main process opens a session (a number). Called from inside a main-process-only branch
  (call_site.py), it decides "main" at once. Otherwise it waits up to `GRACE_SECONDS` for every
  other process to join; all joined: "all" (the usual collective save); not all: "main", with a
  warning naming the processes that did not come.
* another process joins the newest session it has not seen that is still open (skipping those
  decided "main" from a main-only branch, which were never its own), and reads the decision. A
  process that arrives after its session was decided without it is "late": it returns the
  main process's folder, with a warning, and its state is not in that checkpoint.

Which sessions a process has seen is kept in the same store (`_seen_key`), not in the process: a
new process group (a second Accelerator after end_training, a group the script made itself)
meets in a new store whose sessions count from 1 again, and a number remembered from the old
one would make the process pass over the new group's sessions and wait for one that never comes.

A save decided "main" writes the main process's RNG states and dataloader position only, and its
manifest says so (`process_states: [0]`).
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Literal

import torch.distributed as dist

from accel.checkpointing.background import group_store
from accel.checkpointing.call_site import called_on_main_only
from accel.distributed.process_group import timeout_in_force

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

Who = Literal["all", "main", "late"]

GRACE_SECONDS = 5.0
"""How long the main process waits for the others when its call site does not say it saves alone."""
_POLL = 0.01
_COUNT = "accel/save_state/sessions"
_MAIN_BY_CALL_SITE, _MAIN_BY_TIMEOUT, _ALL = "main-call-site", "main-timeout", "all"



def participants(accelerator: CheckpointHost) -> tuple[Who, int]:
    """("all" | "main" | "late", session number) for the save_state this process has entered."""
    state = accelerator.process_state
    if not state.distributed:
        return "all", 0
    store = group_store()  # the group's store (accel made it, or the script did)
    if state.is_main_process:
        return _open(store, state.num_processes)
    return _join(store, state.process_index)


def publish_result(session: int, folder: str) -> None:
    """Main process: the folder of session `session`, for a process that arrives late."""
    group_store().set(f"{_COUNT}/{session}/folder", folder)


def late_folder(session: int) -> str:
    """The folder the main process wrote in session `session` (waits for it)."""
    return group_store().get(f"{_COUNT}/{session}/folder").decode()


def _open(store: dist.Store, processes: int) -> tuple[Who, int]:
    session = store.add(_COUNT, 1)
    if called_on_main_only():
        store.set(f"{_COUNT}/{session}", _MAIN_BY_CALL_SITE)
        return "main", session
    keys = [f"{_COUNT}/{session}/{rank}" for rank in range(1, processes)]
    deadline = time.monotonic() + GRACE_SECONDS
    while not store.check(keys) and time.monotonic() < deadline:
        time.sleep(_POLL)
    joined = store.check(keys)
    store.set(f"{_COUNT}/{session}", _ALL if joined else _MAIN_BY_TIMEOUT)  # one joining now reads it: "late"
    if joined:
        return "all", session
    missing = [rank for rank, key in enumerate(keys, 1) if not store.check([key])]
    warnings.warn(
        f"save_state: process(es) {missing} did not call save_state within {GRACE_SECONDS:g} s of the main process, "
        "so the checkpoint holds the main process's RNG states and dataloader position only (as when save_state is "
        "called inside `if accelerator.is_main_process:`). Call save_state from every process, or inside that `if`.",
        UserWarning,
        stacklevel=4,
    )
    return "main", session


def _join(store: dist.Store, rank: int) -> tuple[Who, int]:
    """Join the main process's open session. A session it closed without this process is this
    process's own only if no newer one opens within the grace period (this process is late, not early)."""
    limit = timeout_in_force()
    deadline = time.monotonic() + limit
    missed: tuple[int, float] | None = None  # (a session decided without this process, when seen)
    seen_key = _seen_key(rank)
    seen = store.add(seen_key, 0)
    while time.monotonic() < deadline:
        newest = store.add(_COUNT, 0)
        for session in range(seen + 1, newest + 1):
            decided = _decision(store, session)
            seen = store.add(seen_key, session - seen)
            if decided == _MAIN_BY_CALL_SITE:
                continue
            if decided is None:
                store.set(f"{_COUNT}/{session}/{rank}", "here")
                decided = store.get(f"{_COUNT}/{session}").decode()  # waits for the main process's decision
                return ("all" if decided == _ALL else "late"), session
            missed = (session, time.monotonic())
        if missed is not None and time.monotonic() - missed[1] > GRACE_SECONDS:
            return "late", missed[0]
        time.sleep(_POLL)
    raise RuntimeError(
        f"save_state: process {rank} waited {limit:g} s for the main process to call save_state too, and it did not. "
        "Call save_state from every process, or from the main process alone (inside `if accelerator.is_main_process:`)."
    )


def _seen_key(rank: int) -> str:
    """The store key of the newest session process `rank` has dealt with (0 before its first save_state).

    Kept in the store whose counter numbered the sessions, so that it starts at 0 with every new
    process group, as that counter does (see the module docstring)."""
    return f"{_COUNT}/seen/{rank}"


def _decision(store: dist.Store, session: int) -> str | None:
    key = f"{_COUNT}/{session}"
    return store.get(key).decode() if store.check([key]) else None
