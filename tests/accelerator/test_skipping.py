"""skip_first_batches leaves out the first batches of every pass, for each kind of dataloader."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from accel.accelerator.skipping import skip_first_batches


def _values(loader: Any) -> list[list[int]]:
    return [batch[0].tolist() if isinstance(batch, list) else batch.tolist() for batch in loader]


def test_a_map_style_loader_keeps_its_order_and_settings_and_skips_each_pass() -> None:
    dataset = TensorDataset(torch.arange(10))
    original = DataLoader(dataset, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(0))
    expected = _values(DataLoader(dataset, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(0)))
    skipped = skip_first_batches(original, 2)
    assert isinstance(skipped, DataLoader) and len(skipped) == 2
    assert _values(skipped) == expected[2:]
    assert len(_values(skipped)) == 2  # the next pass skips again
    assert _values(skip_first_batches(DataLoader(dataset, batch_size=None), 8)) == [8, 9]


def test_an_iterable_dataset_loader_and_any_iterable() -> None:
    class Numbers(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert _values(skip_first_batches(DataLoader(Numbers(), batch_size=2), 2)) == [[4, 5], [6]]
    batches = skip_first_batches([[1], [2], [3]], 1)
    assert list(batches) == [[2], [3]] and list(batches) == [[2], [3]] and len(batches) == 2


def test_a_loader_with_its_own_skip_first_batches_decides_itself() -> None:
    class Own:
        def skip_first_batches(self, num_batches: int) -> str:
            return f"own {num_batches}"

    assert skip_first_batches(Own(), 3) == "own 3"


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match=r"num_batches=-1\) is not accepted: give an int >= 0"):
        skip_first_batches([], -1)
    with pytest.raises(TypeError, match="takes a dataloader"):
        skip_first_batches(5, 1)
