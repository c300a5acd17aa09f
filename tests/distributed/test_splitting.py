"""split_between_processes' shares, computed for each process of a pretend layout (the 2-process run
is in distributed/test_partial_state.py)."""

from __future__ import annotations

import pytest
import torch

from accel.distributed.splitting import share_of, split_between_processes
from accel.distributed.process_state import ProcessState


def _shares(inputs, processes: int, pad: bool = False) -> list:
    return [share_of(inputs, index, processes, pad) for index in range(processes)]


def test_the_first_processes_take_one_more_and_order_is_kept() -> None:
    assert _shares(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert _shares(list(range(7)), 3, pad=True) == [[0, 1, 2], [3, 4, 6], [5, 6, 6]]
    assert _shares(list(range(6)), 3, pad=True) == [[0, 1], [2, 3], [4, 5]]


def test_fewer_items_than_processes() -> None:
    assert _shares(["a"], 3) == [["a"], [], []]
    assert _shares(["a"], 3, pad=True) == [["a"], ["a"], ["a"]]
    assert _shares([], 2, pad=True) == [[], []]


def test_tuples_tensors_and_dicts_keep_their_types() -> None:
    assert _shares(("a", "b", "c"), 2, pad=True) == [("a", "b"), ("c", "c")]
    tensors = _shares(torch.arange(6).reshape(3, 2), 2, pad=True)
    assert [t.tolist() for t in tensors] == [[[0, 1], [2, 3]], [[4, 5], [4, 5]]]
    inputs = {"ids": [1, 2, 3], "mask": torch.tensor([1, 0, 1])}
    second = share_of(inputs, 1, 2, apply_padding=True)
    assert second["ids"] == [3, 3] and second["mask"].tolist() == [1, 1]
    assert inputs["ids"] == [1, 2, 3]  # the caller's dict is not modified (Accelerate's is)


def test_one_process_gets_the_input_itself() -> None:
    inputs = [1, 2, 3]
    with split_between_processes(inputs, ProcessState(device=torch.device("cpu")), apply_padding=True) as share:
        assert share is inputs


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match=r"dict whose values have different lengths \(\{'a': 2, 'b': 1\}\)"):
        share_of({"a": [1, 2], "b": [1]}, 0, 2)
    with pytest.raises(TypeError, match="cannot split a set; it splits a list, tuple, tensor"):
        share_of({1, 2}, 0, 2)
