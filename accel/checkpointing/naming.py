"""Names: automatic checkpoint folders (checkpoint_<n>), their rotation, and the hidden work
folders beside a target (`.<name>.<kind>-<pid>-<start>-<random>`): the checkpoint being written,
the one being replaced, the one being deleted. The pid and the process's start time (Linux) tell
which of them a killed process left, even once the pid is reused by another process."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

CHECKPOINT_PREFIX = "checkpoint_"
_NUMBERED = re.compile(r"checkpoint_(\d+)")
_WORK_FOLDER = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old|del)-(?P<pid>\d+)(?:-(?P<start>\d+))?-[0-9a-f]{8}")
WRITING, REPLACED, DELETING = "tmp", "old", "del"
"""Kinds of work folder: a checkpoint being written; the previous checkpoint of a target being
replaced (moved aside just before the new one is renamed in); a checkpoint being deleted."""


def numbered_name(number: int) -> str:
    """The folder name of automatic checkpoint `number`."""
    return f"{CHECKPOINT_PREFIX}{number}"


def numbered_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """The `checkpoint_<n>` folders in `folder`, oldest (lowest n) first; none if it does not exist."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = _NUMBERED.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def next_number(folder: Path, at_least: int) -> int:
    """The number of the next automatic checkpoint: after every existing one, and >= `at_least`."""
    existing = numbered_checkpoints(folder)
    return max(at_least, existing[-1][0] + 1 if existing else 0)


def to_rotate_out(folder: Path, total_limit: int | None, keep: Path | None = None) -> list[Path]:
    """The oldest checkpoints beyond `total_limit`, never the newest one nor `keep`."""
    existing = [path for _, path in numbered_checkpoints(folder)]
    if total_limit is None or len(existing) <= total_limit:
        return []
    kept = {existing[-1], keep}
    return [path for path in existing if path not in kept][: len(existing) - total_limit]


def work_folder(target: Path, kind: str) -> Path:
    """A hidden folder beside `target`, of one of the kinds above, named after this process."""
    pid = os.getpid()
    start = _start_time(pid)
    stamp = f"{pid}-{start}" if start is not None else str(pid)
    return target.with_name(f".{target.name}.{kind}-{stamp}-{secrets.token_hex(4)}")


def stale_work_folders(folder: Path) -> list[tuple[Path, str, Path]]:
    """(work folder, kind, the target it belongs to) for each one in `folder` whose process no
    longer runs: what a save killed midway left behind."""
    if not folder.is_dir():
        return []
    stale = []
    for entry in sorted(folder.iterdir()):
        match = _WORK_FOLDER.fullmatch(entry.name)
        if match and entry.is_dir() and not _is_running(int(match.group("pid")), match.group("start")):
            stale.append((entry, match.group("kind"), folder / match.group("name")))
    return stale


def leftover_of(target: Path) -> Path | None:
    """A work folder holding an earlier version of `target` (from an interrupted save), if any."""
    if not target.parent.is_dir():
        return None
    for entry in sorted(target.parent.iterdir()):
        match = _WORK_FOLDER.fullmatch(entry.name)
        if match and match.group("name") == target.name and match.group("kind") == REPLACED:
            return entry
    return None


def _is_running(pid: int, start: str | None) -> bool:
    """Whether the process that named a work folder still runs: its pid is alive and, where the
    name records it, started when that process did (else the pid now belongs to another one)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start is None:
        return True
    now = _start_time(pid)
    return now is None or str(now) == start


def _start_time(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/<pid>/stat's 22nd field);
    None where there is no /proc (macOS, Windows) or the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])
