"""Atomic folders: a checkpoint is written into a hidden folder beside its target, synced to
disk, and renamed into place, so that its name only ever shows a complete checkpoint."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from accel.checkpointing.errors import CheckpointWriteError
from accel.checkpointing.naming import DELETING, REPLACED, WRITING, stale_work_folders, work_folder


def publish_folder(target: Path, fill: Callable[[Path], None]) -> None:
    """Create a hidden folder beside `target`, let `fill` write into it, sync it, and rename it
    to `target` (replacing a previous checkpoint there in one step where the OS allows).

    On any error the hidden folder is removed and `target` is left as it was.
    """
    temp = open_work_folder(target)
    try:
        fill(temp)
        move_into_place(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def open_work_folder(target: Path) -> Path:
    """Create and return the hidden folder beside `target` that its checkpoint is written into
    (after tidying what killed saves left there). Several processes may write into it."""
    parent = target.parent
    with _naming_errors(parent):
        parent.mkdir(parents=True, exist_ok=True)
        clear_leftovers(parent)
        temp = work_folder(target, WRITING)
        temp.mkdir()
    return temp


def move_into_place(temp: Path, target: Path) -> None:
    """Sync the filled work folder `temp` (and its subfolders) and rename it to `target`."""
    with _naming_errors(temp):
        for folder in (*(p for p in temp.iterdir() if p.is_dir()), temp):
            sync_folder(folder)
        _move_into_place(temp, target)
        sync_folder(target.parent)


def write_file(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Create `path`, let `write` fill the open file, and sync it to disk. Errors name the file."""
    recorder: _RecordingFile | None = None
    try:
        with open(path, "xb") as file:
            recorder = _RecordingFile(file)
            write(recorder)  # type: ignore[arg-type]  # it forwards the BinaryIO methods writers call
            file.flush()
            os.fsync(file.fileno())
    except ImportError:
        raise  # a library that is not installed is itself, not a disk problem
    except Exception as exc:
        raise _write_error(path, recorder.error if recorder is not None and recorder.error else exc) from exc


def write_path(path: Path, save: Callable[[Path], Any]) -> None:
    """Let `save` (a library writer that takes a path) create `path`, then sync it to disk."""
    try:
        save(path)
        with open(path, "rb") as file:
            os.fsync(file.fileno())
    except ImportError:
        raise  # a library that is not installed is itself, not a disk problem
    except Exception as exc:
        raise _write_error(path, exc) from exc


def _write_error(path: Path, cause: BaseException) -> CheckpointWriteError:
    return CheckpointWriteError(
        f"save_state could not write {str(path)!r}: {_describe(cause)}. The previous checkpoint, if any, "
        "is untouched; free space or fix permissions there, or save elsewhere."
    )


def clear_leftovers(parent: Path) -> None:
    """Tidy what saves killed midway left in `parent`: a previous checkpoint that was moved aside
    for one that never arrived goes back under its name; everything else is deleted."""
    for leftover, kind, target in stale_work_folders(parent):
        if kind == REPLACED and not target.exists():
            os.rename(leftover, target)
        else:
            shutil.rmtree(leftover, ignore_errors=True)


def remove_folder(path: Path) -> None:
    """Delete a checkpoint folder: first renamed to a hidden name (at once it is no checkpoint
    any more), then removed; a kill in between leaves hidden trash that the next save clears."""
    trash = work_folder(path, DELETING)
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def sync_folder(path: Path) -> None:
    """fsync a folder, so that the names created in it survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_into_place(temp: Path, target: Path) -> None:
    """Rename `temp` to `target`. An empty `target` folder is replaced by the rename itself; a
    previous checkpoint is swapped out in one step (Linux renameat2) or, failing that, moved aside
    just before: if the process dies between the two renames, `clear_leftovers` puts it back."""
    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        os.rename(temp, target)
        return
    if _exchange(temp, target):
        shutil.rmtree(temp, ignore_errors=True)
        return
    aside = work_folder(target, REPLACED)
    os.rename(target, aside)
    os.rename(temp, target)
    shutil.rmtree(aside, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE); False where unsupported."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


@contextlib.contextmanager
def _naming_errors(path: Path) -> Iterator[None]:
    """Turn an OSError into a CheckpointWriteError that names the path it happened at."""
    try:
        yield
    except CheckpointWriteError:
        raise
    except OSError as exc:
        where = exc.filename if exc.filename is not None else path
        raise CheckpointWriteError(
            f"save_state could not write in {str(where)!r}: {_describe(exc)}. The previous checkpoint, if any, "
            "is untouched; fix permissions or free space there, or save elsewhere."
        ) from exc


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return f"{type(error).__name__}: {error}"


class _RecordingFile:
    """A file wrapper that keeps the OSError of a failed write: torch.save reports it only as an
    opaque RuntimeError, and the real cause ("No space left on device") is what the user needs."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._file.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self._file.flush()
