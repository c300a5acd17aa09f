"""Names: automatic checkpoint folders (checkpoint_<n>), their rotation, and the hidden work
folders beside a target (`.<name>.<kind>-<pid>-<random>`): the checkpoint being written, the one
being replaced, the one being deleted. The pid tells which of them a killed process left."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

CHECKPOINT_PREFIX = "checkpoint_"
_NUMBERED = re.compile(r"checkpoint_(\d+)")
_WORK_FOLDER = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old|del)-(?P<pid>\d+)-[0-9a-f]{8}")
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
    return target.with_name(f".{target.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def stale_work_folders(folder: Path) -> list[tuple[Path, str, Path]]:
    """(work folder, kind, the target it belongs to) for each one in `folder` whose process no
    longer runs: what a save killed midway left behind."""
    if not folder.is_dir():
        return []
    stale = []
    for entry in sorted(folder.iterdir()):
        match = _WORK_FOLDER.fullmatch(entry.name)
        if match and entry.is_dir() and not _is_running(int(match.group("pid"))):
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


def _is_running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
