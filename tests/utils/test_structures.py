"""accel.utils.structures: Accelerate's nested-structure helpers (`accelerate.utils.operations`), at
both of Accelerate's paths, with container types kept and the refusals Accelerate makes."""

from __future__ import annotations

import pickle
from collections import OrderedDict, UserDict, namedtuple
from typing import NamedTuple

import pytest
import torch
from torch import nn

import accel.utils as utils
import accel.utils.operations as operations
from accel.utils import (
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    copy_tensor_to_devices,
    extract_model_from_parallel,
    find_device,
    honor_type,
    is_namedtuple,
    listify,
    pad_input_tensors,
    recursively_apply,
    slice_tensors,
)

Point = namedtuple("Point", "x y")


class Quant(NamedTuple):
    value: torch.Tensor
    scale: torch.Tensor | None


def test_the_helpers_are_exported_where_accelerate_has_them() -> None:
    for name in ("is_namedtuple", "honor_type", "recursively_apply", "listify", "concatenate", "convert_to_fp32",
                 "convert_outputs_to_fp32", "find_device", "pad_input_tensors", "slice_tensors",
                 "copy_tensor_to_devices", "is_torch_tensor"):
        assert getattr(operations, name) is getattr(utils, name), name
        assert name in utils.__all__ and name in operations.__all__, name


def test_is_namedtuple_and_honor_type() -> None:
    class Sub(Quant):
        pass

    assert is_namedtuple(Point(1, 2)) and is_namedtuple(Quant(torch.tensor(1.0), None))
    assert is_namedtuple(Sub(torch.tensor(1.0), None))
    assert not is_namedtuple((1, 2)) and not is_namedtuple([1, 2]) and not is_namedtuple("hey")
    assert honor_type(Point(0, 0), (v * 2 for v in (1, 2))) == Point(2, 4)
    assert honor_type((0,), iter([1, 2])) == (1, 2) and honor_type([0], iter([3])) == [3]


def test_recursively_apply_keeps_containers_and_passes_arguments() -> None:
    t = torch.tensor([1.0, 2.0])
    data = {"a": [t, (t, "text")], "p": Point(t, 3), "u": UserDict({"k": t}), "o": OrderedDict(z=t)}

    result = recursively_apply(lambda x, k, scale: x * k * scale, data, 2, scale=10)
    assert type(result["a"]) is list and type(result["a"][1]) is tuple and result["a"][1][1] == "text"
    assert isinstance(result["p"], Point) and result["p"].y == 3
    assert type(result["u"]) is UserDict and type(result["o"]) is OrderedDict
    assert result["a"][0].tolist() == [20.0, 40.0] and result["u"]["k"].tolist() == [20.0, 40.0]

    only_ints = recursively_apply(lambda x: x + 1, [1, "a", 2.5], test_type=lambda x: isinstance(x, int))
    assert only_ints == [2, "a", 2.5]


def test_recursively_apply_refuses_other_leaves_when_asked() -> None:
    def double(tensor: torch.Tensor) -> torch.Tensor:
        return tensor * 2

    with pytest.raises(TypeError) as error:
        recursively_apply(double, (torch.tensor(1), 1), error_on_other_type=True)
    assert str(error.value) == (
        "Unsupported types (<class 'int'>) passed to `double`. Only nested list/tuple/dicts of objects that are "
        "valid for `is_torch_tensor` should be passed."
    )
    assert recursively_apply(torch.neg, (torch.tensor(1), 1))[1] == 1


def test_listify_gives_python_numbers_bf16_included() -> None:
    assert listify(torch.tensor([[1, 2], [3, 4]])) == [[1, 2], [3, 4]]
    out = listify({"x": torch.tensor([0.5, 1.5], dtype=torch.bfloat16), "n": [torch.tensor(3)], "s": "keep"})
    assert out == {"x": [0.5, 1.5], "n": [3], "s": "keep"}


def test_concatenate_nested_structures_and_refusals() -> None:
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(concatenate([a, b]), torch.cat([a, b]))
    assert concatenate([a, b], dim=1).shape == (2, 6)
    batches = [{"inputs": [torch.randn(2, 3), torch.randn(2, 4)], "p": Point(torch.ones(2), torch.zeros(2))}
               for _ in range(3)]
    result = concatenate(batches)
    assert [t.shape for t in result["inputs"]] == [(6, 3), (6, 4)]
    assert isinstance(result["p"], Point) and result["p"].x.shape == (6,)
    assert concatenate(["only one"]) == "only one"
    with pytest.raises(TypeError, match="Can only concatenate tensors"):
        concatenate(["a", "b"])


def test_convert_to_fp32_converts_only_half_floats() -> None:
    data = {"bf": torch.ones(2, dtype=torch.bfloat16), "h": [torch.ones(1, dtype=torch.float16)],
            "d": torch.ones(1, dtype=torch.float64), "i": torch.ones(1, dtype=torch.int64), "s": "x"}
    out = convert_to_fp32(data)
    assert out["bf"].dtype == torch.float32 and out["h"][0].dtype == torch.float32
    assert out["d"] is data["d"] and out["i"] is data["i"] and out["s"] == "x"


class _Half(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": self.linear(x).bfloat16(), "ids": torch.zeros(1, dtype=torch.int64)}


def test_convert_outputs_to_fp32_wraps_a_forward_and_can_be_undone() -> None:
    model = _Half()
    model._original_forward = model.forward
    model.forward = convert_outputs_to_fp32(model.forward)
    out = model(torch.ones(1, 2))
    assert out["y"].dtype == torch.float32 and out["ids"].dtype == torch.int64
    assert model.forward.__name__ == "forward" and model.forward.__wrapped__ == model._original_forward
    assert pickle.loads(pickle.dumps(model))(torch.ones(1, 2))["y"].dtype == torch.float32  # picklable in accel

    unwrapped = extract_model_from_parallel(model, keep_fp32_wrapper=False)
    assert unwrapped is model and "forward" not in model.__dict__ and "_original_forward" not in model.__dict__
    assert model(torch.ones(1, 2))["y"].dtype == torch.bfloat16

    @convert_outputs_to_fp32
    def half(x: torch.Tensor) -> torch.Tensor:
        return x.half()

    assert half(torch.ones(1)).dtype == torch.float32


def test_find_device() -> None:
    assert find_device([1, "a", {"t": torch.tensor([1])}]) == torch.device("cpu")
    assert find_device({"a": 1, "b": (torch.empty(1, device="meta"),)}) == torch.device("meta")
    assert find_device([1, "a"]) is None and find_device(3) is None


@pytest.mark.parametrize(
    ("batch_size", "num_processes", "rows"),
    [(1, 2, 2), (3, 2, 4), (4, 3, 6), (3, 4, 4), (4, 6, 6), (1, 6, 6), (2, 6, 6), (61, 6, 66)],
)
def test_pad_input_tensors_gives_accelerates_sizes(batch_size: int, num_processes: int, rows: int) -> None:
    batch = torch.rand(batch_size, 4, 4)
    result = pad_input_tensors(batch, batch_size, num_processes)
    assert result.shape == (rows, 4, 4)
    assert torch.equal(result[:batch_size], batch) and not result[batch_size:].any()


def test_pad_input_tensors_nested_along_dim_and_refusal() -> None:
    padded = pad_input_tensors({"x": [torch.ones(3, 2)]}, 3, 4)
    assert padded["x"][0].shape == (4, 2)
    along_1 = pad_input_tensors(torch.ones(2, 3), 3, 4, dim=1)
    assert along_1.shape == (2, 4) and along_1[:, 3].sum() == 0
    with pytest.raises(TypeError, match="Unsupported types"):
        pad_input_tensors([torch.ones(3), "label"], 3, 4)


def test_slice_tensors() -> None:
    data = {"x": torch.arange(6), "p": Point(torch.arange(4), 7)}
    out = slice_tensors(data, slice(1, 3))
    assert out["x"].tolist() == [1, 2] and out["p"].x.tolist() == [1, 2] and out["p"].y == 7
    assert slice_tensors([torch.arange(3)], 0, process_index=0, num_processes=1)[0].item() == 0


def test_copy_tensor_to_devices_in_one_process() -> None:
    assert copy_tensor_to_devices(torch.tensor([1.0, 2.0])).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="every process passed None"):
        copy_tensor_to_devices(None)
