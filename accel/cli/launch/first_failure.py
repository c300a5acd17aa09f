"""One traceback for one failure: the first failing process prints it, the others are one line each.

When several processes fail the same way (a typo, a bad config: every rank raises the same
error), torchrun's workers would each print the same traceback. Instead, each worker's
excepthook (FirstFailure, installed by worker.py) meets the others in a folder that the wrapper
(distributed_run.py) creates:

* each failing process writes `rank<N>.json`; the first also links it as `first.json` (atomic:
  exactly one process succeeds, and the claim is complete when it appears) and prints its
  traceback;
* a process that fails the same way as the first, or only because the first died under it (a
  collective that lost its peer), prints nothing and marks its file `"shown": false`;
* a process with a failure of its own prints its own traceback: it is not a repeat.

While the hook runs, SIGTERM waits (`_stop_deferred`): the launcher stops every process as soon
as one has failed, and a second process failing at nearly the same moment would otherwise be
stopped halfway through writing its own traceback. It is acted on when the hook is done.

After the workers have ended, the wrapper prints one line for each file marked not shown
(`repeat_lines`) and names the first one's rank (`first_rank`). Stdlib-only (see worker.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

FIRST = "first.json"
"""The claim of the first process that failed: its rank<N>.json, linked."""
_LINE_LIMIT = 160
"""Characters of an error message in a one-line report."""


class FirstFailure:
    """sys.excepthook of a worker: print the traceback unless it repeats the first failure's."""

    def __init__(self, folder: Path, rank: str, previous: Any, hidden_files: tuple[str, ...] = ()) -> None:
        self.folder, self.rank, self.previous, self.hidden_files = folder, rank, previous, hidden_files

    def __call__(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        with _stop_deferred():
            self._report(kind, value, tb)

    def _report(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        tb = _without_frames(tb, self.hidden_files)
        value = value.with_traceback(tb)
        summary = "".join(traceback.format_exception_only(kind, value)).strip()
        record = {"rank": self.rank, "summary": summary, "shown": True, "lost_peer": lost_peer(value),
                  "operation": getattr(value, "operation", None), "reason": getattr(value, "reason", None)}
        first = self._claim(record)
        if first is not None and (first.get("summary") == summary or lost_peer(value)):
            same = first.get("summary") == summary
            self._write({**record, "shown": False, "same": same, "first": first.get("rank")})
            return
        self.previous(kind, value, tb)

    def _write(self, record: dict[str, Any]) -> Path:
        mine = self.folder / f"rank{self.rank}.json"
        mine.write_text(json.dumps(record), encoding="utf-8")
        return mine

    def _claim(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """None when this process is the first to fail (or the folder is gone); else the first one's record."""
        claim = self.folder / FIRST
        try:
            os.link(self._write(record), claim)
            return None
        except FileExistsError:
            try:
                return dict(json.loads(claim.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                return None
        except OSError:  # the folder is gone (the wrapper ended): behave as a plain script
            return None


@contextlib.contextmanager
def _stop_deferred() -> Iterator[None]:
    """Inside, a SIGTERM is noted, not acted on; on leaving, the previous handler is restored and
    the signal sent again, so the process still ends as stopped (status -15 to the launcher)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        yield
        return
    received: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if received:
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGTERM)


def lost_peer(error: BaseException) -> bool:
    """True for the error a process gets when another one died under it (accel's CollectiveError for a peer
    that left, or gloo's own); a collective's timeout is a failure of its own (another process never came)."""
    if type(error).__name__ == "CollectiveError":
        return getattr(error, "reason", None) == "peer left"
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("connection closed by peer" in text or "connection reset by peer" in text)


def _without_frames(tb: TracebackType | None, hidden_files: tuple[str, ...]) -> TracebackType | None:
    """`tb` without its leading frames from `hidden_files` (and frozen runpy): the script's own frames remain."""
    start = tb
    while start is not None and (
        start.tb_frame.f_code.co_filename in hidden_files or start.tb_frame.f_code.co_filename.startswith("<frozen runpy")
    ):
        start = start.tb_next
    return start or tb


def _read(path: Path) -> dict[str, Any] | None:
    """A process's record with its rank as an int; None when unreadable or its rank is not a number."""
    try:
        record = dict(json.loads(path.read_text(encoding="utf-8")))
        return {**record, "rank": int(record["rank"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _records(folder: Path) -> list[dict[str, Any]]:
    """Every failing process's record, in rank order."""
    records = [record for path in folder.glob("rank*.json") if (record := _read(path)) is not None]
    return sorted(records, key=lambda record: record["rank"])


def first_record(folder: Path) -> dict[str, Any]:
    """The record of the failure that caused the others (rank, summary, operation, reason): the first
    failing process's, unless it only lost a peer and another process failed on its own (a collective
    that timed out there can close the connections before that process's report is written); {} when
    none claimed it."""
    record = _read(folder / FIRST)
    if record is None:
        return {}
    if record.get("lost_peer"):
        own = [other for other in _records(folder) if not other.get("lost_peer")]
        if own:
            return own[0]
    return record


def never_joined_line(first: dict[str, Any], running: list[int], world: str) -> str | None:
    """When the first failure was a collective timeout: one line naming the processes that never joined it
    (those the launcher stopped while they still ran; not the first one, stopped while it was ending)."""
    others = [rank for rank in running if rank != first.get("rank")]
    if first.get("reason") != "timeout" or not others:
        return None
    ranks = ", ".join(str(rank) for rank in others)
    plural = "s" if len(others) > 1 else ""
    return (
        f"accel launch: rank{plural} {ranks} of {world} never joined rank {first['rank']}'s {first.get('operation')} "
        f"within the collective timeout; {'they were' if plural else 'it was'} still running, and stopped"
    )


def elsewhere_line(folder: Path, first: dict[str, Any]) -> str | None:
    """When the first failure was a collective timeout and other processes failed waiting in another
    collective: one line saying the processes called different collectives, and the usual cause."""
    if first.get("reason") != "timeout" or not first.get("operation"):
        return None
    elsewhere = [
        (record["rank"], str(record["operation"])) for record in _records(folder)
        if record["rank"] != first["rank"] and record.get("operation") and record.get("operation") != first["operation"]
    ]
    if not elsewhere:
        return None
    where = ", ".join(f"rank {rank} waited in {operation}" for rank, operation in elsewhere)
    return (
        f"accel launch: rank {first['rank']} waited in {first['operation']} while {where}: the processes called "
        "different collectives at this point (a collective inside `if accelerator.is_main_process:`, such as "
        "gather or reduce, is a common cause)"
    )


def repeat_lines(folder: Path) -> list[str]:
    """One line for each failing process whose traceback was not printed, in rank order."""
    lines = []
    for record in _records(folder):
        if record.get("shown", True):
            continue
        last = str(record.get("summary", "")).strip().splitlines()[-1:] or ["?"]
        error = last[0] if len(last[0]) <= _LINE_LIMIT else last[0][: _LINE_LIMIT - 3] + "..."
        if record.get("same"):
            what = f"failed the same way as rank {record.get('first')} ({error}); its traceback is not repeated"
        else:
            where = f" in {record['operation']}" if record.get("operation") else ""
            what = f"stopped{where} because rank {record.get('first')} failed first"
        lines.append(f"accel launch: rank {record.get('rank')} {what}")
    return lines
