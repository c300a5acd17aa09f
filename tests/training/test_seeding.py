"""set_seed: random, NumPy and torch give the same numbers after the same seed."""

from __future__ import annotations

import random

import numpy
import pytest
import torch

from accel.training.seeding import set_seed


def _draw() -> tuple[float, float, list[float]]:
    return random.random(), float(numpy.random.rand()), torch.rand(3).tolist()


def test_the_same_seed_gives_the_same_numbers_everywhere() -> None:
    set_seed(123)
    first = _draw()
    set_seed(123)
    assert _draw() == first
    set_seed(124)
    assert _draw() != first


def test_device_specific_adds_the_process_index(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    set_seed(10, device_specific=True)
    mine = _draw()
    set_seed(11)
    assert _draw() == mine


def test_deterministic_turns_on_deterministic_algorithms() -> None:
    assert not torch.are_deterministic_algorithms_enabled()
    try:
        set_seed(0, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("seed", ["1", 1.0, None, True])
def test_a_seed_must_be_an_int(seed: object) -> None:
    with pytest.raises(TypeError, match=r"set_seed\(seed=.*\) is not accepted: give an int"):
        set_seed(seed)  # type: ignore[arg-type]
