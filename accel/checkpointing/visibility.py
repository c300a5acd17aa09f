"""Before a sharded checkpoint is published: every process's files, confirmed where the manifest says.

In a sharded save every process writes its own shards into the work folder the main process
opened, at a path every process is given. On machines that share a file system they all land in
one folder; on machines with their own disks each machine's shards land on its own disk, at the
same path, and the main process's folder lacks them. Publishing that folder would give a
checkpoint that cannot load. So each process reports the files it wrote (names and sizes, as it
sees them), and the main process checks each is in its work folder, with that size, before it
writes the manifest and renames the folder into place; otherwise nothing is published.

    written = agree_all(accelerator, lambda: write_shards(accelerator, temp), "save_state")
    names = confirm_visible(temp, written, target)   # main process; raises when any is missing
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from accel.checkpointing.errors import CheckpointNotPublishedError

_SHOWN = 6
"""Files named per process in the error; the rest are counted."""
GRACE_SECONDS = 3.0
"""How long files not seen at once are looked for again before the save fails."""
_POLL = 0.1


def confirm_visible(
    folder: Path, written: list[dict[str, int]], target: Path, grace: float = GRACE_SECONDS
) -> list[str]:
    """The names of every file the processes wrote (`written[rank]`: name -> size), once each is
    confirmed in `folder` with its size; else raise CheckpointNotPublishedError naming the processes
    and files that `folder` lacks (or holds with another size). `target`: the folder it would become.
    What is not seen at once is looked for again for up to `grace` seconds (a network file system
    may show another machine's new file a moment late); a complete folder costs one open per file.

    Example: `confirm_visible(Path(".ckpt.tmp"), [{"shards/__0_0.distcp": 96}], Path("ckpt"))`
    -> `["shards/__0_0.distcp"]`.
    """
    deadline = time.monotonic() + grace
    while True:
        problems = {rank: found for rank, files in enumerate(written) if (found := _unseen(folder, files))}
        if not problems or time.monotonic() >= deadline:
            break
        time.sleep(_POLL)
    if problems:
        raise CheckpointNotPublishedError(_message(folder, problems, target))
    return sorted({name for files in written for name in files})


def _unseen(folder: Path, files: dict[str, int]) -> list[str]:
    """The files of one process that `folder` lacks or holds with another size, described."""
    unseen = []
    for name, size in sorted(files.items()):
        try:
            with open(folder / name, "rb") as file:  # opening (not just stat) revalidates a network file system's cache
                seen = os.fstat(file.fileno()).st_size
        except FileNotFoundError:
            unseen.append(f"{name} ({size} bytes) is missing")
            continue
        if seen != size:
            unseen.append(f"{name} has {seen} bytes there, the process wrote {size}")
    return unseen


def _message(folder: Path, problems: dict[int, list[str]], target: Path) -> str:
    ranks = sorted(problems)
    lines = []
    for rank in ranks:
        shown = problems[rank][:_SHOWN]
        more = len(problems[rank]) - len(shown)
        lines.append(f"process {rank}: " + "; ".join(shown) + (f"; and {more} more" if more > 0 else ""))
    return (
        f"save_state did not publish the checkpoint {str(target)!r}: the main process cannot see the files that "
        f"process(es) {ranks} wrote in its work folder {str(folder)!r} ({' | '.join(lines)}). Every process writes "
        "its own shards into the checkpoint folder, so that folder must be on a file system every machine shares, "
        "at the same path on each; here the processes seem to write to disks of their own. Nothing was "
        "published: no manifest was written, the folder was never renamed into place and has been removed, and the "
        "previous checkpoint, if any, is untouched. Put project_dir (or the folder given to save_state) on a shared "
        "file system, or save with fsdp_plugin state_dict_type='FULL_STATE_DICT' (the main process writes it all)."
    )
