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
* a process that lost its peer before any other process claimed a failure prints nothing either:
  the peer may have left without a word (`sys.exit(3)` before its report, a SIGKILL). Its file
  keeps the traceback (`"traceback"`), which the wrapper prints only when no other process failed
  on its own (cause.py);
* a process with a failure of its own prints its own traceback: it is not a repeat;
* a script that ends with `sys.exit(N)`, N not 0, writes its file too (`exited`, called by worker.py;
  there is no traceback to print), so that its status is a failure of its own, not a peer's.

While the hook runs, SIGTERM waits (`_stop_deferred`): the launcher stops every process as soon
as one has failed, and a second process failing at nearly the same moment would otherwise be
stopped halfway through writing its own traceback. It is acted on when the hook is done.

Each file says when it was written (`"at"`, wall-clock seconds). After the workers have ended, the
wrapper decides which failure caused the others and prints one line for each of them (cause.py).
Stdlib-only (see worker.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

FIRST = "first.json"
"""The claim of the first process that failed: its rank<N>.json, linked."""


class FirstFailure:
    """sys.excepthook of a worker: print the traceback unless it repeats the first failure's."""

    def __init__(self, folder: Path, rank: str, previous: Any, hidden_files: tuple[str, ...] = ()) -> None:
        self.folder, self.rank, self.previous, self.hidden_files = folder, rank, previous, hidden_files

    def __call__(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        with _stop_deferred():
            self._report(kind, value, tb)

    def exited(self, code: object) -> None:
        """Record a SystemExit with a non-zero status (`code` as `sys.exit` got it): a failure of this
        process's own, which leaves no traceback, and which a peer that loses its connection must not outrun."""
        status = system_exit_status(code)
        if status == 0:
            return
        with _stop_deferred():
            self._claim({"rank": self.rank, "summary": f"SystemExit: {code}", "shown": True, "lost_peer": False,
                         "exit": status, "at": time.time()})

    def _report(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        at = time.time()  # when it failed, before the report's own work
        tb = _without_frames(tb, self.hidden_files)
        value = value.with_traceback(tb)
        summary = "".join(traceback.format_exception_only(kind, value)).strip()
        record = {"rank": self.rank, "summary": summary, "shown": True, "lost_peer": lost_peer(value),
                  "operation": getattr(value, "operation", None), "reason": getattr(value, "reason", None), "at": at}
        text = self._text(kind, value, tb) if record["lost_peer"] else None
        claimed, first = self._claim(record if text is None else {**record, "shown": False, "traceback": text})
        if first is not None and (first.get("summary") == summary or lost_peer(value)):
            same = first.get("summary") == summary
            self._write({**record, "shown": False, "same": same, "first": first.get("rank")})
            return
        if text is None:
            self.previous(kind, value, tb)
        elif not claimed:  # the folder is gone: print it as a plain script would
            sys.stderr.write(text)
        # else the first to fail, but only because a peer left: the wrapper prints it, or a line (cause.py)

    def _text(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> str:
        """What the previous hook would print for this error, captured instead of printed."""
        buffer = io.StringIO()
        with contextlib.redirect_stderr(buffer):
            self.previous(kind, value, tb)
        return buffer.getvalue()

    def _write(self, record: dict[str, Any]) -> Path:
        mine = self.folder / f"rank{self.rank}.json"
        mine.write_text(json.dumps(record), encoding="utf-8")
        return mine

    def _claim(self, record: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """Write `record`; (True, None) when this process is the first to fail, (False, the first one's
        record) when another was, (False, None) when the folder is gone (the wrapper ended) or unreadable."""
        claim = self.folder / FIRST
        try:
            os.link(self._write(record), claim)
            return True, None
        except FileExistsError:
            try:
                return False, dict(json.loads(claim.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                return False, None
        except OSError:  # the folder is gone: behave as a plain script
            return False, None


def system_exit_status(code: object) -> int:
    """The exit status Python gives `sys.exit(code)`: None -> 0, an int -> itself modulo 256 (as the OS
    keeps it), anything else (a message, printed) -> 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code % 256
    return 1


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


def records(folder: Path) -> list[dict[str, Any]]:
    """Every failing process's record, in rank order."""
    found = [record for path in folder.glob("rank*.json") if (record := _read(path)) is not None]
    return sorted(found, key=lambda record: record["rank"])


def claim_record(folder: Path) -> dict[str, Any] | None:
    """The record of the first process that failed (its claim), or None when none claimed."""
    return _read(folder / FIRST)


def first_record(folder: Path) -> dict[str, Any]:
    """The record of the failure that caused the others (rank, summary, operation, reason): the first
    failing process's, unless it only lost a peer and another process failed on its own (a collective
    that timed out there can close the connections before that process's report is written: the
    earliest of those); {} when none claimed it. cause.find_cause adds the processes that left no record."""
    record = claim_record(folder)
    if record is None:
        return {}
    if record.get("lost_peer"):
        own = [other for other in records(folder) if not other.get("lost_peer")]
        if own:
            return min(own, key=failed_at)
    return record


def failed_at(record: dict[str, Any]) -> tuple[float, int]:
    """A record's sort key, earliest failure first: when it failed (records without a time last), then its rank."""
    at = record.get("at")
    return (float(at) if isinstance(at, (int, float)) else float("inf"), int(record["rank"]))


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
        (record["rank"], str(record["operation"])) for record in records(folder)
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
