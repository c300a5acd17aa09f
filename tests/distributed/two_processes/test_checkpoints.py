"""Checkpoints with 2 real processes: written once by the main process with every process's RNG
and data position, resumed exactly, and loadable by another number of processes between epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accel.checkpointing import CheckpointError
from checkpoint_script import build, train
from launching import Launched, launch


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Launched, Path]:
    folder = tmp_path_factory.mktemp("checkpoints")
    result = launch("checkpoint_script.py", str(folder))
    assert result.returncode == 0, result.stderr[-4000:]
    return result, folder


def test_the_main_process_writes_one_checkpoint_with_every_process_state(saved: tuple[Launched, Path]) -> None:
    _, folder = saved
    assert sorted(p.name for p in folder.iterdir()) == ["epoch", "mid"]  # no work folders left behind
    manifest = json.loads((folder / "mid" / "manifest.json").read_text())
    assert manifest["num_processes"] == 2
    assert {"random_states_0.pt", "random_states_1.pt", "dataloaders_0.pt", "dataloaders_1.pt",
            "gradients.safetensors"} <= set(manifest["files"])


def test_resuming_with_two_processes_continues_exactly(saved: tuple[Launched, Path]) -> None:
    run, _ = saved
    full, resumed = run.of("full"), run.of("resumed")
    assert full[0] == full[1] and resumed[0] == resumed[1]
    torch.testing.assert_close(torch.tensor(resumed[0]), torch.tensor(full[0]), rtol=1e-6, atol=1e-7)


def test_a_checkpoint_between_epochs_loads_in_one_process(saved: tuple[Launched, Path]) -> None:
    _, folder = saved
    parts = build()
    parts[0].load_state(folder / "epoch")
    position = parts[3].state_dict()
    assert (position["epoch"], position["batch"]) == (1, 0)
    # Two processes give a shuffling sampler a generator (as Accelerate); loading gives this one its state.
    assert len(position["rng"]["generators"]) == 1 and position["rng"]["torch"] is None
    assert len(train(parts)) > 0


def test_a_checkpoint_inside_an_epoch_is_refused_by_another_number_of_processes(saved: tuple[Launched, Path]) -> None:
    _, folder = saved
    parts = build()
    with pytest.raises(CheckpointError, match=r"saved by 2 process\(es\) in the middle of an epoch .* this run has 1"):
        parts[0].load_state(folder / "mid")


def test_without_use_stateful_dataloader_a_checkpoint_inside_an_epoch_loads_in_one_process(
    saved: tuple[Launched, Path],
) -> None:
    """The loader's position is not restored by default (as under Accelerate), so the number of processes
    that split the data does not matter: the loader stays as prepared."""
    _, folder = saved
    parts = build(stateful=False)
    parts[0].load_state(folder / "mid")
    position = parts[3].state_dict()
    assert (position["epoch"], position["batch"], position["rng"]) == (0, 0, None)
