"""Asynchronous checkpoints with 2 real processes (DDP): resumed exactly although training went on
during each write, and a write that fails on the main process is raised on every process at the
next call, with nothing published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from launching import Launched, launch

from accel.checkpointing import open_checkpoint


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Launched, Path]:
    folder = tmp_path_factory.mktemp("async_checkpoints")
    result = launch("async_checkpoint_script.py", str(folder), timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    return result, folder


def test_asynchronous_checkpoints_resume_exactly(saved: tuple[Launched, Path]) -> None:
    run, folder = saved
    assert run.of("async_setting") == [True, True]
    full, resumed = run.of("full"), run.of("resumed")
    assert full[0] == full[1] and resumed[0] == resumed[1]
    torch.testing.assert_close(torch.tensor(resumed[0]), torch.tensor(full[0]), rtol=1e-6, atol=1e-7)
    for name in ("mid", "epoch", "after"):
        open_checkpoint(folder / name, name)
    manifest = json.loads((folder / "mid" / "manifest.json").read_text())
    assert {"random_states_1.pt", "dataloaders_1.pt", "gradients.safetensors"} <= set(manifest["files"])


def test_a_failed_write_on_the_main_process_is_raised_on_every_process_at_the_next_save(
    saved: tuple[Launched, Path],
) -> None:
    run, folder = saved
    for kind, message in run.of("next_save"):
        assert kind == "CheckpointWriteError"
        assert "save_state: the previous save_state(async_save=True)" in message
        assert "full_disk" in message and "No space left on device" in message
    assert sorted(p.name for p in folder.iterdir()) == ["after", "at_exit", "epoch", "mid"]  # no full_disk, no work folder
    assert "manifest.json" in run.of("after")[0]


def test_a_script_ending_without_end_training_still_publishes_its_last_asynchronous_checkpoint(
    saved: tuple[Launched, Path],
) -> None:
    _, folder = saved
    open_checkpoint(folder / "at_exit", "at_exit")  # complete: every file matches the manifest
