"""Which collective this process waits in, and since when, in a small file `accel launch` reads.

`accel launch` watches for a stall: some processes waiting in a collective for longer than
stall_report_after while another is not in it (see accel/cli/launch/stall_watch.py). To see that
from outside, each worker started by `accel launch` maps a file of STATE_SIZE bytes
(`rank<N>.state` in the launcher's folder) and accel's collectives count into it: a counter that
is odd while the process is inside a collective (one more on entry, one more on exit), and the
operation's name. The launcher notes when it first saw each odd count, so no clock is read here:
a store into shared memory on entry and on exit, no system call, no lock (the name's bytes are
made once, when the collective is defined, and written only when they change).

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
import traceback
from pathlib import Path
from typing import Any

STATE_SIZE = 128
"""Bytes of a rank's state file: two int64 (the count, the pid), then the operation's name."""
_HEADER = struct.Struct("=2q")
_NAME_AT = _HEADER.size
_NAME_SIZE = STATE_SIZE - _NAME_AT
END = "-- end of stacks --"
"""The line that closes each dump in a stacks file."""

_view: list[Any] = [None]
"""The two int64 of this process's state file, while it is mapped: [count, pid]."""
_count = [0]
"""Collectives entered plus collectives left: odd while inside one."""
_mapping: list[mmap.mmap | None] = [None]
"""The whole state file, while it is mapped (the name is written through it)."""
_last: list[bytes] = [b""]
"""The name last written into the state file."""


@dataclasses.dataclass(frozen=True)
class Marks:
    """One rank's state as the launcher reads it: inside `operation` while `count` is odd."""

    count: int
    operation: str
    pid: int

    @property
    def inside(self) -> bool:
        """Whether the rank is inside a marked operation."""
        return bool(self.count & 1)


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
    view = memoryview(mapping)[:_NAME_AT].cast("q")
    view[1] = os.getpid()
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
    if view is None or _count[0] & 1:
        return False
    if name is not _last[0]:  # backward marks the same name every step: written once
        _mapping[0][_NAME_AT:STATE_SIZE] = name  # type: ignore[index]  # mapped whenever the view is
        _last[0] = name
    _count[0] += 1
    view[0] = _count[0]
    return True


def leave() -> None:
    """This process has left the operation `enter` marked (call it only when `enter` returned True)."""
    _count[0] += 1
    _view[0][0] = _count[0]


def read_marks(path: Path) -> Marks | None:
    """A rank's state file as Marks; None while it is missing or incomplete."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < STATE_SIZE:
        return None
    count, pid = _HEADER.unpack_from(data)
    operation = data[_NAME_AT:STATE_SIZE].rstrip(b"\0").decode(errors="replace")
    return Marks(count, operation, pid)
