"""Ask workers for every thread's Python stack, and show it as a traceback.

A worker under a stall watch writes all its threads' stacks to its stacks file when a byte arrives
in its pipe (accel/distributed/stall_marks.py). `request_stacks` asks the ranks given, waits until
their dumps are complete, and returns what each added; `traceback_lines` turns the dump's "most
recent call first" lists into Python's usual traceback order, with each frame's source line.
Stdlib-only.
"""

from __future__ import annotations

import linecache
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from accel.distributed.stall_marks import END, ask_path, stacks_path

WAIT_S = 2.0
"""The longest the launcher waits for a dump (a process whose native code holds the interpreter never answers)."""
_THREAD = re.compile(r"^Thread (0x[0-9a-f]+) (.*) \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def request_stacks(folder: Path, ranks: Iterable[int]) -> dict[int, str | None]:
    """Each rank's stacks (stall_marks.dump_threads' text); None for a rank that has exited or did not answer
    within WAIT_S."""
    sizes, asked = {}, []
    for rank in ranks:
        sizes[rank] = _size(stacks_path(folder, rank))
        if _ask(ask_path(folder, rank)):
            asked.append(rank)
    found: dict[int, str | None] = dict.fromkeys(sizes)
    deadline = time.monotonic() + WAIT_S
    waiting = list(asked)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.02)
        for rank in list(waiting):
            text = _read_from(stacks_path(folder, rank), sizes[rank])
            if text.rstrip().endswith(END):
                found[rank] = text.rstrip()[: -len(END)]
                waiting.remove(rank)
    return found


def _ask(pipe: Path) -> bool:
    """Write one request byte into `pipe`; False when nobody reads it (the process has exited)."""
    try:
        handle = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader; ENOENT: never made
        return False
    try:
        os.write(handle, b"?")
        return True
    except OSError:
        return False
    finally:
        os.close(handle)


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def threads(dump: str) -> list[tuple[str, list[tuple[str, int, str]]]]:
    """faulthandler's dump as [(thread header, [(file, line, function), ...] outermost first)]."""
    found: list[tuple[str, list[tuple[str, int, str]]]] = []
    for line in dump.splitlines():
        thread = _THREAD.match(line)
        if thread:
            found.append((f"thread {thread.group(2)} ({thread.group(1)})", []))
        frame = _FRAME.match(line)
        if frame and found:
            found[-1][1].insert(0, (frame.group(1), int(frame.group(2)), frame.group(3)))
    return found


def traceback_lines(dump: str, indent: str = "    ") -> list[str]:
    """Every thread of `dump` as a traceback (most recent call last), with the source of each line."""
    lines = []
    for header, frames in threads(dump):
        lines.append(f"{indent}{header}, most recent call last:")
        for file, number, function in _without_bootstrap(frames):
            lines.append(f'{indent}  File "{file}", line {number}, in {function}')
            source = linecache.getline(file, number).strip()
            if source:
                lines.append(f"{indent}    {source}")
    return lines


def _without_bootstrap(frames: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """`frames` without the leading ones of accel's worker bootstrap and runpy: the script's own remain."""
    from accel.cli.launch import worker

    start = 0
    while start < len(frames) and (frames[start][0] == worker.__file__ or frames[start][0].startswith("<frozen runpy")):
        start += 1
    return frames[start:] or frames


def caller(dump: str, hidden: Iterable[str]) -> str | None:
    """'file, line N: source' of the main thread's innermost frame outside the folders `hidden`
    (accel's and torch's): where a waiting rank's script called the collective."""
    found = threads(dump)
    if not found:
        return None
    current = [frames for header, frames in found if header.startswith("thread MainThread ")]
    frames = current[0] if current else found[-1][1]
    folders = tuple(hidden)
    for file, number, _ in reversed(frames):
        if not file.startswith(folders) and not file.startswith("<"):
            source = linecache.getline(file, number).strip()
            return f"{file}, line {number}" + (f": {source}" if source else "")
    return None
