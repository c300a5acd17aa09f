"""Training that survives a restart, run by tests/cli/test_launch_restarts.py under `accel launch --max_restarts`.

    restart_script.py PROJECT_DIR [CRASH_MARKER]

Trains STEPS optimizer steps with a shuffled, stateful loader, saving an automatic checkpoint
(project_dir/checkpoints/checkpoint_<n>) every SAVE_EVERY steps. On start it resumes from the
newest complete checkpoint with `accelerator.load_state()` when there is one: the pattern
docs/distributed.md ("Restarts") shows. With CRASH_MARKER given, rank 1 raises once after step
CRASH_AFTER (it creates the marker first, so the restarted run goes through) while rank 0 is busy
outside any collective until its launcher stops it. Every rank reports
its final parameters, the step it started from and the restarts torchrun counted.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DataLoaderConfiguration, ProjectConfiguration
from launching import report

STEPS = 10
SAVE_EVERY = 3
CRASH_AFTER = 7
"""After step 7: the newest checkpoint is step 6's, so the restart must redo step 7 exactly."""
BUSY_S = 120
"""Rank 0, when rank 1 crashes, is busy outside any collective (evaluating, say) for longer than any restart takes."""


class Progress:
    """The step counter, saved with the checkpoint (register_for_checkpointing)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]


def main(project: Path, marker: Path | None) -> None:
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(64, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    first_attempt = marker is not None and not marker.exists()
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if any((project / "checkpoints").glob("checkpoint_*")):
        accelerator.load_state()  # the newest complete checkpoint under project_dir/checkpoints
    report("started_at", progress.step)
    while progress.step < STEPS:
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress.step += 1
            if progress.step % SAVE_EVERY == 0:
                accelerator.save_state()
            if first_attempt and progress.step == CRASH_AFTER:
                if accelerator.process_index == 1:
                    marker.touch()
                    raise RuntimeError("rank 1 crashes once (test)")
                # rank 0 sees no error of its own: its launcher stops it because the others restart (on another
                # machine: because that machine rejoined the rendezvous), and its restart count stays 0 there
                time.sleep(BUSY_S)
                raise RuntimeError(f"rank 0 was not stopped within {BUSY_S} s of rank 1's crash")
            if progress.step == STEPS:
                break
    report("restarts", int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    report("params", torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist())
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
