"""Collective operations on nested structures (tuples, lists, dicts) of tensors.

Each function takes the ProcessState and does nothing (returns its input) in a single process.
With several processes:

* `gather` concatenates each tensor along its first dimension in rank order (a 0-dim tensor
  becomes a vector of one value per process). Processes may hold different lengths along the
  first dimension; every other dimension, and the structure, must match. One small all-gather of
  the shapes comes first, so that a mismatch raises on every process instead of corrupting data.
* `reduce` sums (or averages) each tensor over the processes, into a new tensor.
* `gather_for_metrics` is `gather` without the padding of an epoch's last batch.
* `broadcast_object` and `gather_objects` move picklable Python objects.

Tensors that the backend cannot move (CPU tensors with nccl) travel through the process's device
and come back where they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from accel._tree import map_tensors
from accel.accelerator.state import ProcessState

REDUCTIONS = ("sum", "mean", "none")

Keep = int | list[int] | None
"""Which rows of a gathered last batch are real samples: the first n, these positions, or all (None)."""

_HEADER_LEAVES = 16
_HEADER_DIMS = 7
"""Shapes travel in one fixed-size tensor when a structure has at most this many tensors of at most
this many dimensions; larger ones use an object all-gather."""


def tensors_of(data: Any) -> list[torch.Tensor]:
    """The tensors in a nested structure, in the order `map_tensors` visits them."""
    found: list[torch.Tensor] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        found.append(tensor)
        return tensor

    map_tensors(keep, data)
    return found


def rebuild(data: Any, tensors: list[torch.Tensor]) -> Any:
    """`data` with its tensors replaced, in visiting order, by `tensors`."""
    supply: Iterator[torch.Tensor] = iter(tensors)
    return map_tensors(lambda _: next(supply), data)


def gather(data: Any, state: ProcessState) -> Any:
    """Every process's tensors, concatenated along the first dimension in rank order."""
    if not state.distributed:
        return data
    leaves = tensors_of(data)
    _check_tensor_data(data, leaves, "gather")
    shapes = _all_shapes([tuple(t.shape) for t in leaves], state)
    return rebuild(data, [_gather_one(t, [s[i] for s in shapes], state) for i, t in enumerate(leaves)])


def reduce(data: Any, state: ProcessState, reduction: str = "sum") -> Any:
    """Each tensor summed (`sum`) or averaged (`mean`) over the processes; `none` returns the input."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduce(reduction={reduction!r}) is not accepted; use one of {', '.join(REDUCTIONS)}.")
    if not state.distributed or reduction == "none":
        return data
    leaves = tensors_of(data)
    _check_tensor_data(data, leaves, "reduce")
    results = []
    for tensor in leaves:
        total = _to_comm(tensor, state).clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        total = total / state.num_processes if reduction == "mean" else total
        results.append(total.to(tensor.device))
    return rebuild(data, results)


def gather_for_metrics(data: Any, state: ProcessState, keep: Keep, use_gather_object: bool = False) -> Any:
    """`gather` (or, for data that is not all tensors, a gather of objects with lists concatenated),
    then only the rows `keep` names (see PreparedDataLoader.gathered_rows_to_keep)."""
    if not state.distributed:
        return data
    as_objects = use_gather_object or not _only_tensors(data)
    if as_objects:
        parts = gather_objects(data, state)
        gathered = [item for part in parts for item in part] if isinstance(data, list) else parts
    else:
        gathered = gather(data, state)
    if keep is None:
        return gathered
    if as_objects:
        return gathered[:keep] if isinstance(keep, int) else [gathered[i] for i in keep]
    if isinstance(keep, int):
        return map_tensors(lambda t: t[:keep], gathered)
    return map_tensors(lambda t: t[torch.tensor(keep, device=t.device)], gathered)


def _only_tensors(data: Any) -> bool:
    """True when `data` is a tensor or a non-empty nested tuple/list/dict of tensors only."""
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, (tuple, list)):
        return bool(data) and all(_only_tensors(item) for item in data)
    if isinstance(data, dict):
        return bool(data) and all(_only_tensors(item) for item in data.values())
    return False


def gather_objects(obj: Any, state: ProcessState) -> list[Any]:
    """[process 0's object, process 1's, ...] (a list of one in a single process)."""
    if not state.distributed:
        return [obj]
    gathered: list[Any] = [None] * state.num_processes
    dist.all_gather_object(gathered, obj)
    return gathered


def broadcast_object(obj: Any, state: ProcessState, from_process: int = 0) -> Any:
    """`from_process`'s object, on every process."""
    if not state.distributed:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=from_process)
    return holder[0]


def broadcast(tensor: torch.Tensor, state: ProcessState, from_process: int = 0) -> torch.Tensor:
    """`from_process`'s values of `tensor`, written into `tensor` on every process (same shape and dtype)."""
    if not state.distributed:
        return tensor
    moved = _to_comm(tensor, state)
    dist.broadcast(moved, src=from_process)
    if moved is not tensor:
        tensor.copy_(moved)
    return tensor


def barrier(state: ProcessState) -> None:
    """Wait until every process has reached this point."""
    if state.distributed:
        dist.barrier(device_ids=[state.device.index] if state.device.type == "cuda" else None)


def _gather_one(tensor: torch.Tensor, shapes: list[tuple[int, ...]], state: ProcessState) -> torch.Tensor:
    """All-gather one tensor whose first dimension may differ between processes."""
    moved = _to_comm(tensor, state).contiguous()
    if moved.ndim == 0:
        moved = moved.reshape(1)
        shapes = [(1,)] * len(shapes)
    longest = max(shape[0] for shape in shapes)
    if moved.shape[0] < longest:
        moved = torch.cat((moved, moved.new_zeros(longest - moved.shape[0], *moved.shape[1:])))
    parts = [torch.empty_like(moved) for _ in shapes]
    dist.all_gather(parts, moved)
    parts = [part[: shape[0]] for part, shape in zip(parts, shapes)]
    return torch.cat(parts).to(tensor.device)


def _all_shapes(shapes: list[tuple[int, ...]], state: ProcessState) -> list[list[tuple[int, ...]]]:
    """Every process's list of tensor shapes; raises on every process when the structures differ."""
    if len(shapes) <= _HEADER_LEAVES and all(len(s) <= _HEADER_DIMS for s in shapes):
        header = torch.full((1 + _HEADER_LEAVES * (1 + _HEADER_DIMS),), -1, dtype=torch.int64)
        header[0] = len(shapes)
        for i, shape in enumerate(shapes):
            start = 1 + i * (1 + _HEADER_DIMS)
            header[start : start + 1 + len(shape)] = torch.tensor([len(shape), *shape])
        headers = [torch.empty_like(header) for _ in range(state.num_processes)]
        dist.all_gather(headers, _to_comm(header, state))
        everyone = [_decode_header(h.cpu()) for h in headers]
    else:
        everyone = gather_objects(shapes, state)
    _check_shapes(everyone)
    return everyone


def _decode_header(header: torch.Tensor) -> list[tuple[int, ...]]:
    values = header.tolist()
    shapes = []
    for i in range(values[0]):
        start = 1 + i * (1 + _HEADER_DIMS)
        shapes.append(tuple(values[start + 1 : start + 1 + values[start]]))
    return shapes


def _check_shapes(everyone: list[list[tuple[int, ...]]]) -> None:
    """Raise ValueError unless every process holds the same number of tensors with the same trailing shapes."""
    main = everyone[0]
    for rank, shapes in enumerate(everyone):
        if len(shapes) != len(main):
            raise ValueError(
                f"gather: process {rank} passed {len(shapes)} tensor(s) but process 0 passed {len(main)}; every "
                "process must pass the same structure."
            )
        for index, (mine, theirs) in enumerate(zip(main, shapes)):
            if len(mine) != len(theirs) or mine[1:] != theirs[1:]:
                raise ValueError(
                    f"gather: tensor {index} has shape {list(theirs)} on process {rank} but {list(mine)} on process "
                    "0; only the first dimension may differ between processes (pad the others to the same size)."
                )


def _check_tensor_data(data: Any, leaves: list[torch.Tensor], operation: str) -> None:
    if not leaves:
        raise TypeError(
            f"{operation} got {type(data).__name__} with no tensor in it; it takes a tensor or a nested "
            "tuple/list/dict of tensors (use gather_for_metrics(..., use_gather_object=True) for other objects)."
        )


def _to_comm(tensor: torch.Tensor, state: ProcessState) -> torch.Tensor:
    """`tensor` where the backend can send it: on the device for nccl/xccl, as it is otherwise."""
    if state.backend in ("nccl", "xccl") and tensor.device != state.device:
        return tensor.to(state.device)
    return tensor
