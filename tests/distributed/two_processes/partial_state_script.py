"""Run by test_partial_state.py under `accel launch --num_processes 2 --cpu`: PartialState and
AcceleratorState beside an Accelerator, split_between_processes, and accel.utils' collectives,
each reported per rank."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from accel import Accelerator, AcceleratorState, PartialState
from accel import utils
from accel.distributed import padding
from launching import report


def main() -> None:
    first = PartialState()  # joins the process group
    world = dist.group.WORLD
    accelerator = Accelerator()  # reuses it
    again = PartialState()
    rank = first.process_index
    same_group = dist.group.WORLD is world and again.backend == first.backend == "gloo"
    report("layout", [rank, first.local_process_index, first.num_processes, first.is_main_process,
                      first.is_local_main_process, first.is_last_process, str(first.device), first.distributed_type,
                      first.use_distributed, same_group, accelerator.process_index == again.process_index])
    report("accelerator_state", [AcceleratorState().mixed_precision, AcceleratorState("bf16").mixed_precision,
                                 AcceleratorState().num_processes])
    splitting(again, rank)
    collectives(rank)
    decorators(again, rank)
    utils.set_seed(7, device_specific=True)
    report("seeded", torch.rand(1).item())


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return ["tuple", *map(_plain, value)]
    return value


def splitting(state: PartialState, rank: int) -> None:
    cases = {
        "list": (list(range(5)), False),
        "list_padded": (list(range(5)), True),
        "one_item_padded": (["only"], True),
        "tuple_padded": (("a", "b", "c"), True),
        "tensor_padded": (torch.arange(10).reshape(5, 2), True),
        "dict": ({"ids": list(range(3)), "x": torch.arange(3.0)}, True),
    }
    shares = {}
    for name, (inputs, pad) in cases.items():
        with state.split_between_processes(inputs, apply_padding=pad) as share:
            shares[name] = _plain(share)
    report("split", shares)


def collectives(rank: int) -> None:
    ragged = {"a": torch.full((rank + 1, 2), float(rank)), "b": [torch.full((2, rank + 1), rank)]}
    padded = utils.pad_across_processes(ragged, pad_index=-1)
    first = utils.pad_across_processes(torch.full((rank + 1,), rank + 1), pad_first=True)
    along_1 = padding.pad_across_processes(ragged["b"], PartialState().process_state, dim=1, pad_index=9)
    report("pad", {"a": padded["a"].tolist(), "b": padded["b"][0].tolist(), "first": first.tolist(),
                   "dim1": along_1[0].tolist(), "gathered": utils.gather(padded["a"]).tolist()})
    report("gather_object", [utils.gather_object([f"r{rank}", rank]), utils.gather_object({"rank": rank})])
    nested = {"a": torch.tensor([rank]), "b": [torch.tensor([rank * 10.0])]}
    out = utils.broadcast(nested, from_process=1)
    objects = [rank, f"from {rank}"]
    returned = utils.broadcast_object_list(objects, from_process=1)
    report("broadcast", [out["a"].tolist(), out["b"][0].tolist(), out["a"] is nested["a"], objects, returned is objects])
    values = torch.tensor([float(rank), -float(rank), 3.0])
    report("reduce", {name: utils.reduce(values, name).tolist() for name in ("sum", "mean", "max", "min")}
           | {"default": utils.reduce(values).tolist(), "scaled": utils.reduce(values, "sum", scale=0.5).tolist()})
    utils.wait_for_everyone()


def decorators(state: PartialState, rank: int) -> None:
    ran = {
        "main": state.on_main_process(lambda: "ran")(),
        "last": state.on_last_process(lambda: "ran")(),
        "process_1": state.on_process(process_index=1)(lambda: "ran")(),
        "local_0": state.on_local_process(local_process_index=0)(lambda: "ran")(),
    }
    report("decorators", ran)
    state.print("PARTIAL PRINTED by", rank)
    with state.main_process_first():
        report("first_done", os.path.exists(os.environ["DISTRIBUTED_TEST_RESULTS"]))


if __name__ == "__main__":
    main()
