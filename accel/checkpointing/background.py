"""The background write of an asynchronous save_state, and how every process learns its outcome.

`save_state(async_save=True)` stages the state in CPU memory and hands the write to one thread
(`start`). At most one such write is under way per process: the next save_state, load_state or
end_training first waits for it (`finish_pending`) and raises its error there, so that a failed
write is reported, never lost. The thread is not a daemon: a script that ends without
end_training still finishes the write before the interpreter exits (Python joins such threads
before its exit handlers run), and `_report_at_exit` prints its error if nobody was told.

With several processes, the thread never runs a collective (one from a second thread could
interleave with the training loop's and deadlock or mismatch them). The processes exchange what
they wrote and the outcome through the process group's key-value store instead, which answers
each request on its own: every process sets `<key>/<rank>` when its part is written (a sharded
save), and the main process, which publishes, sets `<key>/outcome`; a thread on each of the
others waits for it (so that they, too, live until the checkpoint is published), and their next
call raises what it says. A process that died leaves its key unset: the main process gives up
after the collective timeout and publishes nothing.

The store is the one of the process group the save started in, taken on the main thread when it
starts (`group_store`) and handed to the thread: the script may destroy that group, or make
another (a second Accelerator after end_training), while the write goes on, and a thread that
looked the store up then would fail, or tell a store the other processes do not read.
"""

from __future__ import annotations

import atexit
import dataclasses
import pickle
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

from accel.checkpointing.errors import CheckpointWriteError

_POLL = 0.02
"""Seconds between two looks at the store for a key (a blocking wait would hold the store's
connection, which the training loop's own requests share)."""
_PREFIX = "accel/async_save"


@dataclasses.dataclass
class Pending:
    """A save written in the background: this process's thread (which writes its part, if any, and
    on the other processes then waits for the outcome) and, with several processes, the store key
    of the outcome (set by the main process, which publishes)."""

    target: Path
    thread: threading.Thread | None
    outcome_key: str | None
    store: dist.Store | None
    publishes: bool
    error: BaseException | None = None
    reported: bool = False


_pending: list[Pending] = []
"""The save under way in this process, if any (at most one)."""


def start(target: Path, work: Callable[[], None], outcome_key: str | None = None, publishes: bool = True) -> None:
    """Run `work` in the background thread. `outcome_key` (several processes): where the main
    process (`publishes`) sets the outcome when `work` ends, and the others read it, in the store of
    the process group running now. Call `finish_pending` first."""
    store = group_store() if outcome_key is not None else None
    pending = Pending(target, None, outcome_key, store, publishes)

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # kept for the next call, which raises it
            pending.error = exc
        if outcome_key is None or store is None:
            return
        if publishes:
            _publish_outcome(store, outcome_key, pending.error)
            return
        try:  # the main process's outcome, which covers this process's part too
            pending.error = _remote_error(take(store, outcome_key, f"the outcome of saving {str(target)!r}"))
        except BaseException as exc:
            pending.error = exc

    pending.thread = threading.Thread(target=run, name=f"accel-async-save:{target.name}", daemon=False)
    _pending.append(pending)
    pending.thread.start()


def expect(target: Path, outcome_key: str) -> None:
    """On a process that writes nothing: the outcome of the save of `target` arrives under `outcome_key`.
    A thread waits for it, so that this process, too, lives until the checkpoint is published when
    the script ends without end_training (else the launcher would stop the main process midway)."""
    start(target, lambda: None, outcome_key, publishes=False)


def run_and_report(store: dist.Store, key: str, work: Callable[[], Any]) -> Callable[[], None]:
    """A thread body for a process that writes its part and reports it (or its error) under `key` in `store`."""

    def body() -> None:
        try:
            value: Any = ("ok", work())
        except BaseException as exc:
            value = ("error", type(exc).__name__, str(exc))
            put(store, key, pickle.dumps(value))
            raise
        put(store, key, pickle.dumps(value))

    return body


def finish_pending(call: str) -> None:
    """Wait for the save under way, if any; raise its error (every process the same) naming `call`.

    Example: `finish_pending("load_state")` before load_state reads the project's checkpoints.
    """
    if not _pending:
        return
    pending = _pending.pop()
    if pending.thread is not None:
        pending.thread.join()
    error = pending.error
    pending.reported = True
    if error is not None:
        raise _reported(error, pending.target, call) from error


def group_store() -> dist.Store:
    """The running process group's key-value store. Call it on the main thread when a save starts, and
    hand it to the background thread (see the module docstring).

    Example: `store = group_store(); start(target, run_and_report(store, key, work), outcome, publishes=False)`
    """
    return dist.distributed_c10d._get_default_store()


def put(store: dist.Store, key: str, value: bytes) -> None:
    """Set `key` in `store`."""
    store.set(key, value)  # type: ignore[arg-type]  # bytes are stored as given


def take(store: dist.Store, key: str, what: str, timeout: float | None = None) -> bytes:
    """The value of `key` in `store` once it is set; CheckpointWriteError after `timeout` seconds
    (default: the collective timeout) naming `what` was awaited."""
    from accel.distributed.process_group import timeout_in_force

    limit = timeout_in_force() if timeout is None else timeout
    deadline = time.monotonic() + limit
    while not store.check([key]):
        if time.monotonic() > deadline:
            raise CheckpointWriteError(
                f"save_state(async_save=True): waited {limit:g} s for {what}, and it never came (a process died or "
                "stopped saving). Nothing was published; the previous checkpoint, if any, is untouched."
            )
        time.sleep(_POLL)
    return store.get(key)


def forget(store: dist.Store, key: str) -> None:
    """Delete `key` from `store` once read (a report of every shard file, per process and save, would
    otherwise pile up in the store's memory over a long run)."""
    try:
        store.delete_key(key)
    except (RuntimeError, NotImplementedError):  # a store without deletion keeps it: a few kilobytes
        pass


def outcome_key(token: str) -> str:
    """The store key prefix of one asynchronous save (`token`: chosen by the main process)."""
    return f"{_PREFIX}/{token}"


def _publish_outcome(store: dist.Store, key: str, error: BaseException | None) -> None:
    value = ("ok",) if error is None else ("error", type(error).__name__, str(error))
    try:
        put(store, key, pickle.dumps(value))
    except Exception as exc:  # the store is gone (its server stopped): the others cannot be told
        print(f"accel: could not tell the other processes how a background save ended: {exc}", file=sys.stderr)


def _remote_error(raw: bytes) -> BaseException | None:
    from accel.checkpointing.across_processes import _rebuild

    outcome = pickle.loads(raw)
    return None if outcome[0] == "ok" else _rebuild(outcome, "the main process")


def _reported(error: BaseException, target: Path, call: str) -> BaseException:
    """`error` as raised at `call`, saying which save failed: a CheckpointWriteError for any OSError
    (it is one), else the same type where it can be rebuilt."""
    message = (
        f"{call}: the previous save_state(async_save=True) of {str(target)!r} failed in the background and was not "
        f"published (the previous checkpoint, if any, is untouched): {error}"
    )
    if isinstance(error, OSError) and not isinstance(error, CheckpointWriteError):
        return CheckpointWriteError(message)
    try:
        rebuilt = type(error)(message)
    except Exception:
        return CheckpointWriteError(message)
    return rebuilt if str(rebuilt) == message else CheckpointWriteError(message)


def _report_at_exit() -> None:
    """At exit (after Python joined the thread): print the error of a save nobody waited for."""
    for pending in _pending:
        if not pending.reported and pending.error is not None:
            print(
                f"accel: save_state(async_save=True) of {str(pending.target)!r} failed in the background and was "
                f"not published: {pending.error}",
                file=sys.stderr,
            )


atexit.register(_report_at_exit)
