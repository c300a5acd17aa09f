"""`split_between_processes`: give each process its contiguous share of a list, tuple, tensor or dict.

Accelerate's semantics: with `n` items over `p` processes, the first `n % p` processes get
`n // p + 1` items and the others `n // p`, in order. With `apply_padding=True` every process
gets `ceil(n / p)` items, the shorter shares padded with the last item of the whole input (so
that results can be gathered; drop the padded ones afterwards). A dict's values (all of one
length) are split alike. No communication is needed: each process computes its share.

Differences from Accelerate, each deliberate: a dict given in is not modified (Accelerate
overwrites its values); tuples can be padded (Accelerate raises); a padded tensor stays where it
was (Accelerate moves it to the device); a type that cannot be split raises TypeError instead of
being handed whole to every process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from accel.distributed.process_state import ProcessState


@contextlib.contextmanager
def split_between_processes(inputs: Any, state: ProcessState, apply_padding: bool = False) -> Iterator[Any]:
    """Context manager yielding this process's share of `inputs` (all of it in a single process)."""
    yield share_of(inputs, state.process_index, state.num_processes, apply_padding)


def share_of(inputs: Any, process_index: int, num_processes: int, apply_padding: bool = False) -> Any:
    """Process `process_index`'s share of `inputs` among `num_processes` (see the module docstring)."""
    if num_processes == 1:
        return inputs
    length = _length(inputs)
    per_process, extras = divmod(length, num_processes)
    start = process_index * per_process + min(process_index, extras)
    end = start + per_process + (1 if process_index < extras else 0)
    target = per_process + (1 if extras else 0) if apply_padding else 0
    return _split(inputs, start, end, target)


def _length(inputs: Any) -> int:
    if isinstance(inputs, dict):
        lengths = {key: _length(value) for key, value in inputs.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"split_between_processes got a dict whose values have different lengths ({lengths}); every value "
                "must have the same number of items, so that each process gets matching items."
            )
        return next(iter(lengths.values()), 0)
    if isinstance(inputs, (list, tuple, torch.Tensor)) or _is_dataset(inputs):
        return len(inputs)
    raise TypeError(
        f"split_between_processes cannot split a {type(inputs).__name__}; it splits a list, tuple, tensor, "
        "datasets.Dataset, or a dict of those. Convert the input to a list first."
    )


def _split(inputs: Any, start: int, end: int, target: int) -> Any:
    """`inputs[start:end]`, padded with the last item of `inputs` up to `target` items."""
    if isinstance(inputs, dict):
        return type(inputs)((key, _split(value, start, end, target)) for key, value in inputs.items())
    if _is_dataset(inputs):
        indices = list(range(min(start, len(inputs)), min(end, len(inputs))))
        return inputs.select(indices + [len(inputs) - 1] * max(0, target - len(indices)))
    share = inputs[start:end]
    missing = target - len(share)
    if missing <= 0 or len(inputs) == 0:
        return share
    if isinstance(inputs, torch.Tensor):
        return torch.cat((share, inputs[-1:].expand(missing, *inputs.shape[1:])))
    return share + type(share)([inputs[-1]] * missing)


def _is_dataset(inputs: Any) -> bool:
    """True for a Hugging Face `datasets.Dataset` (split by index with `select`)."""
    return type(inputs).__module__.startswith("datasets") and callable(getattr(inputs, "select", None))
