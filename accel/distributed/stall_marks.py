"""Which collective this process waits in, and since when, in a small file `accel launch` reads.

`accel launch` watches for a stall: some processes waiting in a collective for longer than
stall_report_after while another is not in it (see accel/cli/launch/stall_watch.py). To see that
from outside, each worker started by `accel launch` maps a file of STATE_SIZE bytes
(`rank<N>.state` in the launcher's folder) and accel's collectives write into it on entry (the
time and the operation's name) and on exit (time 0, one more completed collective). These are
stores into shared memory: no system call, no lock, no allocation (the name's bytes are made once,
when the collective is defined), so a collective costs a few hundred nanoseconds more.

The same worker runs a daemon thread that sleeps in a read of the pipe `rank<N>.ask`; when the
launcher writes a byte there, it appends every thread's stack (sys._current_frames) to
`rank<N>.stacks`, then an END line. It takes the interpreter's lock like any thread, so it
answers while the main thread sleeps, waits in a collective or in I/O (all of which release it).
(faulthandler's signal-handler dump was tried first: dumping the other threads from a signal
handler, without that lock, crashed a process within seconds under repeated requests.)

Outside `accel launch` (or with stall_report_after 0) nothing is mapped, and `enter` returns at
once. Stdlib-only: the worker opens the marks before the script imports torch.

Example (what accel's collectives do; `label` once, at definition)::

    name = label("gather")
    marked = enter(name)
    try:
        ...  # the collective
    finally:
        if marked:
            leave()
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

STATE_SIZE = 128
"""Bytes of a rank's state file: three doubles (since, completed, pid), then the operation's name."""
_HEADER = struct.Struct("=3d")
_NAME_AT = _HEADER.size
_NAME_SIZE = STATE_SIZE - _NAME_AT
END = "-- end of stacks --"
"""The line that closes each dump in a stacks file."""

_view: list[Any] = [None]
"""The three doubles of this process's state file, while it is mapped: [since, completed, pid] (a memoryview
of format 'd', which typeshed types as holding ints)."""
_mapping: list[mmap.mmap | None] = [None]
"""The whole state file, while it is mapped (the name is written through it)."""


@dataclasses.dataclass(frozen=True)
class Marks:
    """One rank's state as the launcher reads it: in `operation` since `since` (time.monotonic; 0: in none)."""

    since: float
    operation: str
    completed: int
    pid: int


def state_path(folder: Path, rank: int | str) -> Path:
    """The state file of `rank` in the launcher's folder."""
    return folder / f"rank{rank}.state"


def stacks_path(folder: Path, rank: int | str) -> Path:
    """The file `rank` appends its stacks to when asked."""
    return folder / f"rank{rank}.stacks"


def ask_path(folder: Path, rank: int | str) -> Path:
    """The pipe through which the launcher asks `rank` for its stacks (one byte per request)."""
    return folder / f"rank{rank}.ask"


def open_marks(folder: Path, rank: str) -> None:
    """In a worker: map this rank's state file, and start the thread that writes every thread's stack when asked."""
    path = state_path(folder, rank)
    with open(path, "wb") as file:
        file.write(bytes(STATE_SIZE))
    with open(path, "r+b") as file:
        mapping = mmap.mmap(file.fileno(), STATE_SIZE)
    ask = ask_path(folder, rank)
    if ask.exists():  # an earlier attempt's (accel launch --max_restarts)
        ask.unlink()
    os.mkfifo(ask)
    requests = os.open(ask, os.O_RDWR)  # read-write: no end of file while the launcher has it closed
    stacks = stacks_path(folder, rank)
    threading.Thread(target=_answer, args=(requests, stacks), name="accel-stacks", daemon=True).start()
    view = memoryview(mapping)[:_NAME_AT].cast("d")
    view[2] = float(os.getpid())
    _mapping[0] = mapping
    _view[0] = view


def _answer(requests: int, stacks: Path) -> None:
    """The stacks thread: for each byte read from `requests`, append every thread's stack to `stacks`."""
    while os.read(requests, 1):
        with open(stacks, "a", encoding="utf-8") as file:
            file.write(dump_threads() + END + "\n")


def dump_threads() -> str:
    """Every thread's stack but the caller's, innermost frame first (faulthandler's layout, with thread names)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    me = threading.get_ident()
    parts = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        frames = traceback.extract_stack(frame)
        lines = [f'  File "{entry.filename}", line {entry.lineno} in {entry.name}' for entry in reversed(frames)]
        parts.append("\n".join([f"Thread {ident:#x} {names.get(ident, '?')} (most recent call first):", *lines]))
    return "\n\n".join(parts) + "\n"


def label(operation: str) -> bytes:
    """`operation` as the fixed-size bytes `enter` writes (made once, where the collective is defined)."""
    return operation.encode()[:_NAME_SIZE].ljust(_NAME_SIZE, b"\0")


def enter(name: bytes) -> bool:
    """Mark this process as waiting in the operation `name` (see `label`) from now; False (nothing marked) outside
    `accel launch` or inside another marked operation (gather_for_metrics calls gather: the outer one counts)."""
    view = _view[0]
    if view is None or view[0]:
        return False
    _mapping[0][_NAME_AT:STATE_SIZE] = name  # type: ignore[index]  # mapped whenever the view is
    view[0] = time.monotonic()
    return True


def leave() -> None:
    """This process has left the operation `enter` marked."""
    view = _view[0]
    if view is not None:
        view[0] = 0.0
        view[1] += 1.0


def read_marks(path: Path) -> Marks | None:
    """A rank's state file as Marks; None while it is missing or incomplete."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < STATE_SIZE:
        return None
    since, completed, pid = _HEADER.unpack_from(data)
    operation = data[_NAME_AT:STATE_SIZE].rstrip(b"\0").decode(errors="replace")
    return Marks(since, operation, int(completed), int(pid))
