"""Report a stall: processes waiting in a collective that another process of this machine has not joined.

A collective waits for every process, up to the collective timeout (30 minutes by default), and
says nothing meanwhile; a short timeout would kill legitimate waits (the main process evaluating
or saving while the others wait). Instead, the torchrun wrapper (distributed_run.py) runs a
StallWatch thread: every POLL_S it reads each worker's marks (accel/distributed/stall_marks.py).
When a rank has waited in a collective for `after` seconds while another rank is not in that
collective, it prints, once for that wait:

* which rank is missing, and where it is: every thread's stack (asked for through the rank's
  pipe, shown as a traceback with source lines);
* what the waiting ranks wait in, for how long, and the script's line that called it.

Training goes on: the report only reads. When a collective does time out, `stacks_of` gives the
stacks of the ranks still running, printed with the final report (distributed_run.py).

The watch sees this machine's processes: with several machines, each launcher reports its own.

Example::

    watch = StallWatch(folder, after=60, label="train.py", world="4")
    watch.start()
    ...  # torchrun runs the workers
    watch.stop()
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from accel.cli.launch.stacks import WAIT_S, caller, request_stacks, traceback_lines
from accel.distributed.stall_marks import Marks, read_marks

DEFAULT_AFTER_S = 60
"""Seconds of waiting before a stall is reported, when stall_report_after is not given."""
POLL_S = 0.5
"""Seconds between two reads of the marks."""


def _hidden_folders() -> tuple[str, ...]:
    """accel's and torch's folders: frames there are not the script's own (see stacks.caller)."""
    import accel

    folders = [str(Path(accel.__file__).parent)]
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        folders.append(str(Path(str(torch.__file__)).parent))
    return tuple(folders)


class StallWatch:
    """A daemon thread that prints a report for each stall (see the module's docstring)."""

    def __init__(
        self, folder: Path, after: float, label: str, world: str, write: Callable[[str], None] | None = None
    ) -> None:
        self.folder, self.after, self.label, self.world = folder, after, label, world
        self.write = write or (lambda text: print(text, file=sys.stderr, flush=True))
        self._reported: set[tuple[int, float]] = set()
        self._since: dict[int, tuple[tuple[int, int], float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="accel-stall-watch", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (a report being printed is finished first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            report = self.check(time.monotonic())
            if report:
                self.write("\n".join(report))

    def marks(self) -> dict[int, Marks]:
        """Each rank's marks, for the ranks whose state file is complete."""
        found = {}
        for path in self.folder.glob("rank*.state"):
            rank = path.name.removeprefix("rank").removesuffix(".state")
            marks = read_marks(path) if rank.isdigit() else None
            if marks is not None and marks.pid:
                found[int(rank)] = marks
        return found

    def waits(self, now: float) -> tuple[dict[int, Marks], dict[int, float]]:
        """Each rank's marks, and when this watch first saw each rank that is inside an operation in it (the
        worker reads no clock: the time is the first poll that saw its count)."""
        marks = self.marks()
        seen = {rank: (mark.pid, mark.count) for rank, mark in marks.items() if mark.inside}
        updated = {}
        for rank, key in seen.items():
            previous = self._since.get(rank)
            updated[rank] = previous if previous is not None and previous[0] == key else (key, now)
        self._since = updated
        return marks, {rank: then for rank, (_, then) in self._since.items()}

    def check(self, now: float) -> list[str] | None:
        """The lines of a report when a stall not yet reported is seen at `now` (time.monotonic), else None."""
        marks, since = self.waits(now)
        self._reported &= {(rank, since[rank]) for rank in since}  # forget the waits that ended
        late = {rank: then for rank, then in since.items() if now - then >= self.after}
        if not late:
            return None
        first = min(late, key=late.__getitem__)
        operation = marks[first].operation
        waiters = sorted(rank for rank in since if marks[rank].operation == operation)
        missing = sorted(rank for rank in marks if rank not in waiters)
        key = (first, late[first])
        if not missing or key in self._reported:
            return None
        self._reported.add(key)
        return self._report(now, marks, since, operation, waiters, missing)

    def _report(
        self, now: float, marks: dict[int, Marks], since: dict[int, float], operation: str, waiters: list[int],
        missing: list[int],
    ) -> list[str]:
        stacks = request_stacks(self.folder, [*missing, *waiters])
        hidden = _hidden_folders()
        names = ", ".join(str(rank) for rank in missing)
        waits = ", ".join(f"{rank}" for rank in waiters)
        longest = now - min(since[rank] for rank in waiters)
        lines = [
            f"accel launch: {self.label}: stall: rank{'s' if len(waiters) > 1 else ''} {waits} of {self.world} "
            f"{'have' if len(waiters) > 1 else 'has'} waited {longest:.0f} s in {operation}, which rank"
            f"{'s' if len(missing) > 1 else ''} {names} {'have' if len(missing) > 1 else 'has'} not joined. Training "
            "goes on (this is reported once per stall; the collective timeout still applies)."
        ]
        for rank in waiters:
            called = caller(stacks.get(rank) or "", hidden)
            where = f", called at {called}" if called else ""
            lines.append(f"  rank {rank} waits in {operation} for {now - since[rank]:.0f} s{where}")
        for rank in missing:
            lines.extend(self._missing_lines(rank, marks[rank], since.get(rank), stacks.get(rank), now))
        return lines

    def _missing_lines(self, rank: int, mark: Marks, since: float | None, dump: str | None, now: float) -> list[str]:
        where = f"in {mark.operation} (for {now - since:.0f} s)" if since is not None else "in none of accel's collectives"
        if dump is None:
            return [f"  rank {rank} is {where}; it has exited, or its Python did not answer within {WAIT_S:g} s (native "
                    "code holding the interpreter), so no stack could be taken"]
        return [f"  rank {rank} is {where}; its threads now:", *traceback_lines(dump)]

    def stacks_of(self, ranks: Sequence[int]) -> list[str]:
        """Every thread's stack of each of `ranks` that still runs, as lines (for the report of a collective timeout)."""
        lines = []
        for rank, dump in sorted(request_stacks(self.folder, ranks).items()):
            if dump:
                lines.append(f"accel launch: rank {rank}'s threads when it was stopped:")
                lines.extend(traceback_lines(dump))
        return lines
