"""send_to_device moves every tensor of a nested structure, keeping container types."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any

import torch

from accel.data.transfer import send_to_device

Pair = namedtuple("Pair", "x y")


class _OnlyDevice:
    """Has a .to() that takes no non_blocking (Accelerate falls back to .to(device))."""

    def __init__(self) -> None:
        self.moved_to: Any = None

    def to(self, device: Any) -> _OnlyDevice:
        self.moved_to = device
        return self


def test_nested_tensors_move_and_containers_keep_their_types() -> None:
    meta = torch.empty(0, device="meta")
    data = OrderedDict(a=[torch.ones(2), (torch.zeros(1), "text")], b=Pair(torch.ones(1), 3), keep=torch.ones(1))
    moved = send_to_device(data, "meta", skip_keys="keep")
    assert type(moved) is OrderedDict and type(moved["a"][1]) is tuple and type(moved["b"]) is Pair
    assert moved["a"][0].device == meta.device and moved["a"][1][0].device == meta.device
    assert moved["a"][1][1] == "text" and moved["b"].y == 3
    assert moved["keep"].device.type == "cpu"
    assert send_to_device({"k": torch.ones(1)}, "meta", skip_keys=["k"])["k"].device.type == "cpu"


def test_objects_with_a_to_method_are_moved_even_without_non_blocking() -> None:
    thing = send_to_device([_OnlyDevice()], "cpu", non_blocking=True)[0]
    assert thing.moved_to == "cpu"
    assert send_to_device(5, "meta") == 5
