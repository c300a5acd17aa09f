"""Launched by test_fsdp_async_save.py: asynchronous sharded checkpoints with 2 FSDP2 processes.

    fsdp_async_save_script.py MODE FOLDER

* save: the uninterrupted run (TOTAL steps, SHARDED_STATE_DICT), then for SHARDED_STATE_DICT
  (FOLDER/run) and FULL_STATE_DICT (FOLDER/full) a run that saves
  asynchronously after steps SAVE_AT - 1 and SAVE_AT (total_limit=1), trains one step more (which
  changes the weights and AdamW's moments in place while the shards may still be written), and
  ends; then a run in which process 1's shard writer fails (ENOSPC) in the background: every
  process reports the error end_training raised, and what the project folder holds.
* resume: the saved runs resumed from their newest checkpoint to TOTAL.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import torch.distributed.checkpoint as dcp
from fsdp_save_state_script import TOTAL, build, full_state, train
from launching import report

from accel.checkpointing import CheckpointWriteError

SAVE_AT = 5


KINDS = {"run": "SHARDED_STATE_DICT", "full": "FULL_STATE_DICT"}
"""Project folder -> the plugin's state_dict_type of the run saved there."""


def save(folder: Path) -> None:
    straight = build("no", None)
    report("losses", train(straight, TOTAL))
    report("straight", full_state(straight))
    straight[0].end_training()
    for name, kind in KINDS.items():
        parts = build("no", folder / name, kind)
        parts[0].project_configuration.async_save = True
        saves = {SAVE_AT - 1: parts[0].save_state, SAVE_AT: parts[0].save_state}
        train(parts, SAVE_AT + 1, saves)
        parts[0].end_training()
        report(f"{name}_layout", sorted(str(p.relative_to(folder / name)) for p in (folder / name).rglob("*")))
    failing(folder)


def failing(folder: Path) -> None:
    parts = build("no", folder / "fail")
    accelerator = parts[0]

    def fail_in_the_background() -> None:
        if accelerator.process_index == 1:
            def no_space(*args: object) -> None:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            dcp.FileSystemWriter.write_data = no_space  # type: ignore[method-assign,assignment]
        accelerator.save_state(async_save=True)

    train(parts, 2, {2: fail_in_the_background})
    try:
        accelerator.end_training()
        report("fail_error", None)
    except CheckpointWriteError as error:
        report("fail_error", str(error))
    report("fail_left", sorted(p.name for p in (folder / "fail" / "checkpoints").iterdir()))


def resume(folder: Path) -> None:
    for name, kind in KINDS.items():
        parts = build("no", folder / name, kind)
        report(f"{name}_loaded", parts[0].load_state().name)
        report(f"{name}_resumed_losses", train(parts, TOTAL))
        report(f"{name}_resumed", full_state(parts))
        parts[0].end_training()


if __name__ == "__main__":
    {"save": save, "resume": resume}[sys.argv[1]](Path(sys.argv[2]))
