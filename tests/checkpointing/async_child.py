"""A child process for test_async_save.py: a run that saves asynchronously, then is killed or just ends.

    python async_child.py MODE PROJECT_DIR

Both modes save checkpoint_0 (asynchronously, then wait for it with a second call) and start a
second asynchronous save of the changed model whose write is held at its first file:

* kill: the write prints "writing" and sleeps; the test kills the process with SIGKILL then.
* exit: the write waits 1 s, and the script returns without end_training: the interpreter must
  still finish the write before the process exits.

The weights of each save are written to PROJECT_DIR/expected_<n>.pt by the script itself.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

import accel.checkpointing.serialization as serialization
from accel import Accelerator, ProjectConfiguration


def main(mode: str, project: Path) -> None:
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=project, async_save=True))
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(64, 64))
    for number in range(2):
        with torch.no_grad():
            model.weight.add_(1.0)
        torch.save(model.weight.detach().clone(), project / f"expected_{number}.pt")
        if number == 1:
            _hold_the_write(mode)
        accelerator.save_state()
        if number == 0:
            accelerator.load_state()  # waits for checkpoint_0 to be published
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on while checkpoint_1 is written
    if mode == "kill":
        time.sleep(60)  # killed long before this ends


def _hold_the_write(mode: str) -> None:
    original = serialization.save_file

    def held(*args: Any, **kwargs: Any) -> None:
        if mode == "kill":
            print("writing", flush=True)
            time.sleep(60)
        time.sleep(1.0)
        original(*args, **kwargs)

    serialization.save_file = held  # type: ignore[assignment]  # the writer save_tensors calls


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
