"""Dispatching batches from the main process (`DataLoaderConfiguration(dispatch_batches=True)`,
Accelerate's DataLoaderDispatcher; the default for an IterableDataset when batches go to the device).

Only process 0 iterates the user's DataLoader. Each step it takes W batches (W processes) and
concatenates them, or with `split_batches` one batch; it sends the result's structure (shapes,
dtypes, non-tensor values) and then its tensors to every process, which keeps its slice of the
first dimension: process r takes rows [r*b, (r+1)*b) with b = rows // W. So process r sees, batch
for batch, what Accelerate's dispatcher gives it:

* the last step may take fewer than W batches (the loader ran out): they are concatenated and
  split the same way, each process taking rows // W of them;
* when that last step's rows do not divide by W (and the DataLoader does not `drop_last`), the
  first W rows of the epoch's first step are appended and every process takes rows // W + 1;
* with `drop_last` a short last step is dropped (the DataLoader drops its short last batch, and
  fewer than W batches at the end make no step).

`len()` is the loader's length (`split_batches`), divided by W (`drop_last`) or divided by W and
rounded up. The epoch's last batch sets the loader's `remainder` to the rows of that last step
(before padding), so `gather_for_metrics` keeps exactly those. `even_batches` plays no part, as in
Accelerate. The other processes never iterate the DataLoader: they draw the one value from torch's
RNG that opening its iterator draws on process 0, so that their RNG streams stay as Accelerate's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from accel.data.loader_options import loader_options
from accel.data.sharding import Sharding
from accel.distributed import operations
from accel.distributed.process_state import ProcessState

SliceFn = Callable[..., Any]
"""`slice_fn(batch, slice, process_index=..., num_processes=...)`: a process's part of a dispatched batch."""


class _TensorInfo:
    """What the other processes need to receive a tensor: its shape and dtype."""

    __slots__ = ("dtype", "shape")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype

    def __reduce__(self) -> tuple[Any, ...]:
        return (_info, (self.shape, self.dtype))


def _info(shape: tuple[int, ...], dtype: torch.dtype) -> _TensorInfo:
    info = object.__new__(_TensorInfo)
    info.shape, info.dtype = shape, dtype
    return info


def walk(fn: Callable[[Any], Any], obj: Any, leaf: type) -> Any:
    """`obj` with `fn` applied to each `leaf` inside tuples, lists and mappings (their types kept)."""
    if isinstance(obj, leaf):
        return fn(obj)
    if isinstance(obj, tuple):
        items = [walk(fn, item, leaf) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, list):
        return [walk(fn, item, leaf) for item in obj]
    if isinstance(obj, Mapping):
        return type(obj)({key: walk(fn, value, leaf) for key, value in obj.items()})  # type: ignore[call-arg]  # dict-like
    return obj


def concatenate(parts: list[Any]) -> Any:
    """Batches of the same structure joined along the first dimension of each tensor."""
    head = parts[0]
    if isinstance(head, torch.Tensor):
        try:
            return torch.cat(parts)
        except RuntimeError as error:
            raise RuntimeError(
                "dispatch_batches=True: process 0 joins W batches into one before sending each process its part, and "
                f"these do not fit together ({error}). Give batches of the same shape (pad them in collate_fn), use "
                "split_batches=True (one batch is split), or dispatch_batches=False (each process reads its own)."
            ) from error
    if isinstance(head, (tuple, list)):
        items = [concatenate([part[i] for part in parts]) for i in range(len(head))]
        return type(head)(*items) if hasattr(head, "_fields") else type(head)(items)
    if isinstance(head, Mapping):
        return type(head)({key: concatenate([part[key] for part in parts]) for key in head})  # type: ignore[call-arg]
    raise TypeError(
        f"dispatch_batches=True joins batches of tensors, and this batch holds a {type(head).__name__}. Make the "
        "collate_fn return tensors (in tuples, lists or dicts), or use DataLoaderConfiguration(dispatch_batches=False)."
    )


def batch_rows(batch: Any) -> int:
    """The first dimension of the batch's first tensor (the first item of a sequence, the first value of a mapping)."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    if isinstance(batch, (tuple, list)) and batch:
        return batch_rows(batch[0])
    if isinstance(batch, Mapping) and batch:
        return batch_rows(next(iter(batch.values())))
    raise TypeError(f"dispatch_batches=True: cannot tell how many rows this batch has ({type(batch).__name__}).")


def slice_tensors(batch: Any, rows: slice, process_index: int | None = None, num_processes: int | None = None) -> Any:
    """`rows` of every tensor in `batch` (Accelerate's default slice_fn_for_dispatch)."""
    return walk(lambda tensor: tensor[rows], batch, torch.Tensor)


class Dispatching(Sharding):
    """How a prepared loader with dispatch_batches=True gets its batches (module docstring)."""

    def __init__(self, state: ProcessState, split_batches: bool, drop_last: bool,
                 slice_fn: SliceFn | None = None) -> None:
        self._state = state
        self.split_batches = split_batches
        self.drop_last = drop_last
        self.slice_fn = slice_fn or slice_tensors
        self.last_rows = -1
        """Rows of the epoch's last step before padding, once its last batch has been made."""
        self._ran_out = False

    def length(self, loader: DataLoader[Any]) -> int:
        whole, processes = len(loader), self._state.data_parallel_size
        if self.split_batches:
            return whole
        return whole // processes if self.drop_last else -(-whole // processes)

    dispatches = True

    def open(self, loader: DataLoader[Any], skip: int) -> Iterator[Any]:
        return itertools.islice(self.batches(loader), skip, None)

    def ending_remainder(self, remainder: int) -> int:
        return self.last_rows

    def batches(self, loader: DataLoader[Any]) -> Iterator[Any]:
        """This process's batches of one epoch of `loader` (only process 0 reads it)."""
        state = self._state
        processes, rank = state.data_parallel_size, state.data_parallel_index  # a tp group shares a slice
        source = iter(loader) if state.process_index == 0 else _draw_iterator_seed(loader)
        self.last_rows, self._ran_out = -1, False
        start: Any = None
        upcoming, structure = self._fetch(source)
        if structure is None:  # nothing to dispatch (Accelerate raises for an empty loader)
            return
        last = False
        while not last:
            batch = self._receive(upcoming, structure)
            if not self.drop_last and start is None:
                start = self.slice_fn(batch, slice(0, processes), process_index=rank, num_processes=processes)
            rows = batch_rows(batch)
            share = rows // processes
            last = self._ran_out
            if not last:
                upcoming, structure = self._fetch(source)
                last = self._ran_out and structure is None
            if last and not self.drop_last and rows % processes:
                batch, share = concatenate([batch, start]), share + 1
            if last:
                self.last_rows = rows
            yield self.slice_fn(batch, slice(rank * share, (rank + 1) * share), process_index=rank, num_processes=processes)

    def _fetch(self, source: Iterator[Any] | None) -> tuple[Any, Any]:
        """Process 0's next step (W batches joined, or one with split_batches) and, on every process, its
        structure (None when there is none); sets `_ran_out` once the loader has ended."""
        state, batch, taken, ended = self._state, None, [], False
        if state.process_index == 0:
            assert source is not None
            try:
                if self.split_batches:
                    batch = next(source)
                else:
                    for _ in range(state.data_parallel_size):
                        taken.append(next(source))
                    batch = concatenate(taken)
            except StopIteration:
                batch, ended = None, True
        structure = None if batch is None else walk(_TensorInfo, batch, torch.Tensor)
        structure, self._ran_out = operations.broadcast_object([structure, ended], state)
        if self._ran_out and not self.split_batches and not self.drop_last:  # the batches of a last, partial step
            batch = concatenate(taken) if taken else None
            structure = None if batch is None else walk(_TensorInfo, batch, torch.Tensor)
            structure = operations.broadcast_object(structure, state)
        return batch, structure

    def _receive(self, batch: Any, structure: Any) -> Any:
        """Process 0's step, on this process's device."""
        device = self._state.device
        if self._state.process_index != 0:
            batch = walk(lambda info: torch.empty(info.shape, dtype=info.dtype, device=device), structure, _TensorInfo)
        else:
            batch = walk(lambda tensor: tensor.to(device), batch, torch.Tensor)
        leaves: list[torch.Tensor] = []
        walk(leaves.append, batch, torch.Tensor)
        for tensor in leaves:
            operations.broadcast(tensor, self._state, check_shapes=False)
        return batch


def dispatch_loader(loader: DataLoader[Any], state: ProcessState, split_batches: bool,
                    slice_fn: SliceFn | None = None) -> tuple[DataLoader[Any], Dispatching]:
    """The DataLoader process 0 reads (the user's, without its `generator` argument, as Accelerate's
    dispatcher builds it; the sampler keeps its own) and the Dispatching that deals its batches out."""
    options = {name: value for name, value in loader_options(loader).items() if name != "generator"}
    drop_last = bool(loader.drop_last)
    if isinstance(loader.dataset, IterableDataset):
        rebuilt = DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=drop_last, **options)
    elif loader.batch_sampler is None:
        rebuilt = DataLoader(loader.dataset, sampler=loader.sampler, batch_size=None, **options)
    else:
        rebuilt = DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **options)
    return rebuilt, Dispatching(state, split_batches, drop_last, slice_fn)


def _draw_iterator_seed(loader: DataLoader[Any]) -> Iterator[Any] | None:
    """What opening the DataLoader's iterator draws from torch's RNG (its base seed), on a process that
    does not read it (Accelerate opens the iterator on every process)."""
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    return None
