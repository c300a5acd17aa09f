"""A prepared dataloader with its own torch.Generator resumes exactly from a checkpoint taken
between epochs: the next epoch's order is the one the uninterrupted run draws (the generator's
state is part of the position), with a real save_state/load_state and use_stateful_dataloader=True;
without it, load_state leaves the loader as prepared (as Accelerate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from accel import Accelerator, DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.training.gradient_state import GradientState

CPU = torch.device("cpu")


def _loader(generator: bool = True) -> DataLoader[Any]:
    options = {"generator": torch.Generator().manual_seed(4)} if generator else {}
    return DataLoader(list(range(6)), batch_size=2, shuffle=True, **options)


def _epoch(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


def test_a_position_between_epochs_carries_the_generators_state() -> None:
    running = PreparedDataLoader(_loader(), CPU, GradientState(1), False)
    _epoch(running)
    state = running.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 0)
    expected = [_epoch(running) for _ in range(2)]
    resumed = PreparedDataLoader(_loader(), CPU, GradientState(1), False)
    resumed.load_state_dict(state)
    assert resumed.state_dict()["epoch"] == 1
    assert [_epoch(resumed) for _ in range(2)] == expected


def test_without_a_generator_the_position_between_epochs_has_no_rng() -> None:
    running = PreparedDataLoader(_loader(generator=False), CPU, GradientState(1), False)
    _epoch(running)
    assert running.state_dict() == {"epoch": 1, "batch": 0, "rng": None}


def _run(folder: Path, resume: bool, stateful: bool = True) -> list[list[list[int]]]:
    """Three epochs, saving after the first (outside the loop), or loading that save and doing the rest."""
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful))
    loader = accelerator.prepare(_loader())
    if resume:
        accelerator.load_state(folder)
    epochs = []
    for epoch in range(1 if resume else 0, 3):
        epochs.append(_epoch(loader))
        if epoch == 0:
            accelerator.save_state(folder)
    return epochs


def test_save_state_between_epochs_then_load_state_continues_in_the_same_order(tmp_path: Path) -> None:
    """With use_stateful_dataloader=True."""
    straight = _run(tmp_path / "checkpoint", resume=False)
    assert _run(tmp_path / "checkpoint", resume=True) == straight[1:]


def test_by_default_load_state_leaves_the_loader_as_prepared(tmp_path: Path) -> None:
    """As under Accelerate: no position, epoch number or generator state is restored, so the resumed
    passes are those of a fresh loader (the saved run's first epochs), whatever the checkpoint holds."""
    straight = _run(tmp_path / "checkpoint", resume=False, stateful=False)
    assert straight[0] != straight[1]  # the generator does move on between epochs
    assert _run(tmp_path / "checkpoint", resume=True, stateful=False) == straight[:2]
