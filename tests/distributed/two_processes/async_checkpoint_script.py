"""Asynchronous checkpoints with 2 processes (DDP), run by test_async_checkpoints.py under `accel launch`.

    async_checkpoint_script.py FOLDER

ACCEL_ASYNC_SAVE=true (the setting's variable) makes every save_state asynchronous. The run of
checkpoint_script.py saves FOLDER/mid (inside an accumulation window: the gradients are averaged
on the main thread before save_state returns) and FOLDER/epoch while training goes on; a second
Accelerator loads FOLDER/mid (load_state waits for the write under way) and trains to the end.
Then the main process's disk "fills up" (its safetensors writer raises ENOSPC) during a save of
FOLDER/full_disk: every process reports the error its next save_state raised, and a save after
that (FOLDER/after) works. Last, a slow save of FOLDER/at_exit, and the script ends without end_training.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ["ACCEL_ASYNC_SAVE"] = "true"

from checkpoint_script import build, train  # noqa: E402
from launching import report  # noqa: E402

import accel.checkpointing.serialization as serialization  # noqa: E402
from accel.checkpointing import CheckpointWriteError  # noqa: E402


def main(folder: Path) -> None:
    parts = build()
    report("async_setting", parts[0].project_configuration.async_save)
    report("full", train(parts, folder))
    resumed = build()
    resumed[0].load_state(folder / "mid")
    report("resumed", train(resumed))
    _full_disk(resumed[0], folder)


def _full_disk(accelerator: Any, folder: Path) -> None:
    original = serialization.save_file
    if accelerator.is_main_process:
        def no_space(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        serialization.save_file = no_space  # type: ignore[assignment]
    accelerator.save_state(folder / "full_disk")  # returns; the write fails in the background
    serialization.save_file = original  # type: ignore[assignment]
    try:
        accelerator.save_state(folder / "after")
    except CheckpointWriteError as error:
        report("next_save", [type(error).__name__, str(error)])
    accelerator.save_state(folder / "after")
    _end_without_end_training(accelerator, folder)


def _end_without_end_training(accelerator: Any, folder: Path) -> None:
    """The last save is slow to write (2 s) and the script just ends: every process must live until
    the main process has published it (Python joins the save's thread before exiting)."""
    original = serialization.save_file
    if accelerator.is_main_process:
        def slow(*args: Any, **kwargs: Any) -> None:
            time.sleep(2.0)
            original(*args, **kwargs)

        serialization.save_file = slow  # type: ignore[assignment]
    accelerator.save_state(folder / "at_exit")  # first waits for FOLDER/after
    report("after", sorted(p.name for p in (folder / "after").iterdir()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
