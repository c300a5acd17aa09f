"""Collective operations on nested structures (tuples, lists, dicts) of tensors.

Each function takes the ProcessState and does nothing (returns its input) in a single process.
With several processes:

* `gather` concatenates each tensor along its first dimension in rank order (a 0-dim tensor
  becomes a vector of one value per process). Processes may hold different lengths along the
  first dimension; every other dimension, and the structure, must match. One small all-gather of
  the shapes comes first, so that a mismatch raises on every process instead of corrupting data.
* `reduce` sums, averages, or takes the maximum or minimum of each tensor over the processes,
  into a new tensor. Shapes must match exactly; the same small all-gather checks them first (a
  mismatch, such as per-sample values of an uneven last batch, would otherwise hang or corrupt).
* `gather_for_metrics` is `gather` cut, at an epoch's last batch, to the rows the loader says are real.
* `broadcast` copies one process's tensors (a nested structure) into every process's, whose
  shapes are checked the same way.
* `broadcast_object`, `broadcast_object_list`, `gather_objects` and `gather_object` move
  picklable Python objects. (`pad_across_processes` lives in padding.py.)

Tensors that the backend cannot move (CPU tensors with nccl) travel through the process's device
and come back where they were. A collective that times out or loses a peer raises CollectiveError
naming this process's rank and the operation (see errors.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from accel._tree import map_tensors
from accel.distributed.errors import named_collective
from accel.distributed.process_state import ProcessState

REDUCTIONS = ("sum", "mean", "max", "min", "none")
_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}

Keep = int | list[int] | None
"""Which rows of a gathered last batch are real samples: the first n, these positions, or all (None)."""
Shape = tuple[int, ...]


class DistributedOperationException(ValueError):
    """The tensors of a collective do not fit together across the processes (different structures or
    shapes); raised on every process, before the collective runs. Accelerate's name (it raises it in
    debug mode only); a ValueError."""


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


@named_collective("gather")
def gather(data: Any, state: ProcessState) -> Any:
    """Every process's tensors, concatenated along the first dimension in rank order."""
    if not state.distributed:
        return data
    leaves = tensors_of(data)
    _check_tensor_data(data, leaves, "gather")
    shapes = all_shapes([tuple(t.shape) for t in leaves], state, "gather")
    return rebuild(data, [_gather_one(t, [s[i] for s in shapes], state) for i, t in enumerate(leaves)])


@named_collective("reduce")
def reduce(data: Any, state: ProcessState, reduction: str = "sum", check_shapes: bool = True) -> Any:
    """Each tensor summed (`sum`), averaged (`mean`), or its elementwise maximum (`max`) or minimum
    (`min`) over the processes; `none` returns the input. (Accelerate's `none` sums, and it has no `min`.)
    `check_shapes=False`: the caller knows the shapes match (accel's own calls), so no all-gather checks them."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduce(reduction={reduction!r}) is not accepted; use one of {', '.join(REDUCTIONS)}.")
    if not state.distributed or reduction == "none":
        return data
    leaves = tensors_of(data)
    _check_tensor_data(data, leaves, "reduce")
    if check_shapes:
        all_shapes([tuple(t.shape) for t in leaves], state, "reduce")
    results = []
    for tensor in leaves:
        total = _to_comm(tensor, state).clone()
        dist.all_reduce(total, op=_REDUCE_OPS[reduction])
        total = total / state.num_processes if reduction == "mean" else total
        results.append(total.to(tensor.device))
    return rebuild(data, results)


@named_collective("gather_for_metrics")
def gather_for_metrics(data: Any, state: ProcessState, keep: Keep, use_gather_object: bool = False) -> Any:
    """Accelerate's gather_for_metrics: `gather` (or, for data that is not all tensors, or with
    `use_gather_object`, the objects of every process concatenated; in one process the object itself),
    then only the rows `keep` names (see PreparedDataLoader.gathered_rows_to_keep). Data that cannot
    be cut so (a 0-dim tensor, an object without slicing) is returned whole, as Accelerate returns it."""
    as_objects = use_gather_object or not _only_tensors(data)
    gathered = _concatenated_objects(data, state) if as_objects else gather(data, state)
    if keep is None:
        return gathered
    try:
        if as_objects:
            return gathered[:keep] if isinstance(keep, int) else [gathered[i] for i in keep]
        if isinstance(keep, int):
            return map_tensors(lambda t: t[:keep], gathered)
        return map_tensors(lambda t: t[torch.tensor(keep, device=t.device)], gathered)
    except (IndexError, TypeError, KeyError):
        return gathered


def _concatenated_objects(obj: Any, state: ProcessState) -> Any:
    """Every process's `obj` iterated and joined into one list, in process order (in one process, `obj`)."""
    if not state.distributed:
        return obj
    parts = gather_objects(obj, state)
    try:
        return [item for part in parts for item in part]
    except TypeError as error:
        raise TypeError(
            f"gather_for_metrics gathers a {type(obj).__name__} as Python objects and joins every process's items "
            "into one list, so it must be iterable (a list of values, say). Wrap the value in a list."
        ) from error


def _only_tensors(data: Any) -> bool:
    """True when `data` is a tensor or a non-empty nested tuple/list/dict of tensors only."""
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, (tuple, list)):
        return bool(data) and all(_only_tensors(item) for item in data)
    if isinstance(data, dict):
        return bool(data) and all(_only_tensors(item) for item in data.values())
    return False


@named_collective("gather_object")
def gather_objects(obj: Any, state: ProcessState) -> list[Any]:
    """[process 0's object, process 1's, ...] (a list of one in a single process)."""
    if not state.distributed:
        return [obj]
    gathered: list[Any] = [None] * state.num_processes
    dist.all_gather_object(gathered, obj)
    return gathered


def gather_object(obj: Any, state: ProcessState) -> list[Any]:
    """Accelerate's `gather_object`: the lists (or tuples) of every process concatenated into one
    list in process order; any other object gives a list of one object per process.

    (Accelerate concatenates whatever each process passes, so a dict gives its keys and an int
    fails; in one process it returns the object itself.)
    """
    parts = gather_objects(obj, state)
    if isinstance(obj, (list, tuple)):
        return [item for part in parts for item in part]
    return parts


@named_collective("broadcast_object")
def broadcast_object(obj: Any, state: ProcessState, from_process: int = 0) -> Any:
    """`from_process`'s object, on every process."""
    _check_source(from_process, state)
    if not state.distributed:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=from_process)
    return holder[0]


@named_collective("broadcast_object_list")
def broadcast_object_list(objects: list[Any], state: ProcessState, from_process: int = 0) -> list[Any]:
    """Replace, in place, the items of `objects` by `from_process`'s; returns `objects`. Every process
    passes a list of the same length (Accelerate's meaning)."""
    _check_source(from_process, state)
    if not isinstance(objects, list):
        raise TypeError(
            f"broadcast_object_list takes a list (filled in place), not {type(objects).__name__}; wrap the object "
            "in a list, or use broadcast_object."
        )
    if state.distributed:
        dist.broadcast_object_list(objects, src=from_process)
    return objects


@named_collective("broadcast")
def broadcast(data: Any, state: ProcessState, from_process: int = 0, check_shapes: bool = True) -> Any:
    """`from_process`'s values of every tensor in `data` (a tensor or a nested tuple/list/dict of them),
    written into those tensors on every process (same structure, shapes and dtypes); returns `data`.
    `check_shapes`: as for :func:`reduce`."""
    _check_source(from_process, state)
    if not state.distributed:
        return data
    leaves = tensors_of(data)
    _check_tensor_data(data, leaves, "broadcast")
    if check_shapes:
        all_shapes([tuple(t.shape) for t in leaves], state, "broadcast")
    for tensor in leaves:
        moved = _to_comm(tensor, state)
        dist.broadcast(moved, src=from_process)
        if moved is not tensor:
            tensor.copy_(moved)
    return data


@named_collective("wait_for_everyone (barrier)")
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


def all_shapes(shapes: list[Shape], state: ProcessState, operation: str) -> list[list[Shape]]:
    """Every process's list of tensor shapes; raises on every process when they do not fit `operation`."""
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
    _check_shapes(everyone, operation)
    return everyone


def _decode_header(header: torch.Tensor) -> list[tuple[int, ...]]:
    values = header.tolist()
    shapes = []
    for i in range(values[0]):
        start = 1 + i * (1 + _HEADER_DIMS)
        shapes.append(tuple(values[start + 1 : start + 1 + values[start]]))
    return shapes


_SHAPE_RULES: dict[str, tuple[Callable[[Shape, Shape], bool], str]] = {
    "gather": (lambda a, b: len(a) == len(b) and a[1:] == b[1:],
               "only the first dimension may differ between processes (pad the others to the same size)"),
    "reduce": (lambda a, b: a == b,
               "reduce needs the same shape on every process (for per-sample values of an uneven last batch, "
               "reduce their sum and their count, or use gather_for_metrics)"),
    "broadcast": (lambda a, b: a == b, "every process must pass tensors of the source's shapes"),
    "pad_across_processes": (lambda a, b: len(a) == len(b), "padding evens out sizes, not numbers of dimensions"),
}
"""operation: (do two processes' shapes of one tensor fit it, what to do when they do not)."""


def _check_shapes(everyone: list[list[Shape]], operation: str) -> None:
    """Raise DistributedOperationException unless every process holds the same number of tensors, with
    shapes that fit `operation` (its rule in _SHAPE_RULES)."""
    fits, advice = _SHAPE_RULES[operation]
    main = everyone[0]
    for rank, shapes in enumerate(everyone):
        if len(shapes) != len(main):
            raise DistributedOperationException(
                f"{operation}: process {rank} passed {len(shapes)} tensor(s) but process 0 passed {len(main)}; every "
                "process must pass the same structure."
            )
        for index, (mine, theirs) in enumerate(zip(main, shapes)):
            if not fits(mine, theirs):
                raise DistributedOperationException(
                    f"{operation}: tensor {index} has shape {list(theirs)} on process {rank} but {list(mine)} on "
                    f"process 0; {advice}."
                )


_FOR_OBJECTS = {
    "gather": "gather_object or gather_for_metrics(..., use_gather_object=True)",
    "broadcast": "broadcast_object_list",
}


def _check_tensor_data(data: Any, leaves: list[torch.Tensor], operation: str) -> None:
    if not leaves:
        instead = _FOR_OBJECTS.get(operation, "gather_object")
        raise TypeError(
            f"{operation} got {type(data).__name__} with no tensor in it; it takes a tensor or a nested "
            f"tuple/list/dict of tensors (use {instead} for other objects)."
        )


def _to_comm(tensor: torch.Tensor, state: ProcessState) -> torch.Tensor:
    """`tensor` where the backend can send it: on the device for nccl/xccl, as it is otherwise."""
    if state.backend in ("nccl", "xccl") and tensor.device != state.device:
        return tensor.to(state.device)
    return tensor


def _check_source(from_process: Any, state: ProcessState) -> None:
    """A broadcast's source must be one of the processes (torch would fail deep inside the collective)."""
    if isinstance(from_process, bool) or not isinstance(from_process, int) or not 0 <= from_process < state.num_processes:
        raise ValueError(
            f"broadcast(from_process={from_process!r}): give the index of a process, an int from 0 to "
            f"{state.num_processes - 1} (this run has {state.num_processes})."
        )
