"""The collective operations in a single process, and their checks of bad input (the 2-process
results are in distributed/test_collectives.py and distributed/test_partial_state.py)."""

from __future__ import annotations

import pytest
import torch

from accel.distributed import operations

from accel.distributed import padding
from accel.distributed.process_state import ProcessState

ONE = ProcessState(device=torch.device("cpu"))


def test_in_one_process_the_data_comes_back() -> None:
    data = {"a": torch.ones(2), "b": [torch.zeros(1)]}
    for reduction in ("sum", "mean", "max", "min", "none"):
        assert operations.reduce(data, ONE, reduction) is data
    assert operations.broadcast(data, ONE, from_process=0) is data
    assert padding.pad_across_processes(data, ONE, dim=1) is data
    objects = [1, "x"]
    assert operations.broadcast_object_list(objects, ONE) is objects and objects == [1, "x"]


def test_gather_object_gives_one_list() -> None:
    assert operations.gather_object([1, 2], ONE) == [1, 2]
    assert operations.gather_object((1, 2), ONE) == [1, 2]
    assert operations.gather_object({"k": 1}, ONE) == [{"k": 1}]


def test_bad_input_raises_naming_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"reduction='avg'.*use one of sum, mean, max, min, none"):
        operations.reduce(torch.ones(1), ONE, "avg")
    with pytest.raises(TypeError, match="broadcast_object_list takes a list .*not tuple"):
        operations.broadcast_object_list((1, 2), ONE)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"pad_across_processes got a str \('x'\); it pads a tensor"):
        padding.pad_across_processes({"a": torch.ones(1), "b": "x"}, ONE)


def test_a_nested_tensor_is_left_unpadded_with_a_warning_in_one_process_too() -> None:
    nested = torch.nested.nested_tensor([torch.ones(3), torch.ones(1)])
    with pytest.warns(padding.CannotPadNestedTensorWarning, match="cannot pad a nested tensor"):
        assert padding.pad_across_processes(nested, ONE) is nested
