"""`pad_across_processes`: pad tensors to the largest size any process has along one dimension.

Accelerate's semantics: every tensor in a nested tuple/list/dict is padded along `dim` to the
largest size that dimension has on any process, with `pad_index`, at the end (or at the start
with `pad_first=True`), so that the tensors can then be gathered. A tensor with fewer than
`dim + 1` dimensions is left as it is; a nested (jagged) tensor is left as it is, with a warning.
One all-gather of the shapes, for the whole structure, is all the communication.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from accel.distributed.errors import named_collective
from accel.distributed.operations import all_shapes, rebuild, tensors_of
from accel.distributed.process_state import ProcessState


class CannotPadNestedTensorWarning(UserWarning):
    """A nested (jagged) tensor was left unpadded: its sizes do not fit one padded shape."""


@named_collective("pad_across_processes")
def pad_across_processes(
    data: Any, state: ProcessState, dim: int = 0, pad_index: Any = 0, pad_first: bool = False
) -> Any:
    """`data` with each tensor padded along `dim` to the largest size among the processes (see the module)."""
    _check_only_tensors(data)
    leaves = tensors_of(data)
    if any(getattr(tensor, "is_nested", False) for tensor in leaves):  # said in one process too, as Accelerate does
        warnings.warn("pad_across_processes cannot pad a nested tensor; leaving it as it is.",
                      CannotPadNestedTensorWarning, stacklevel=2)
    if not state.distributed:
        return data
    shapes = all_shapes([tuple(t.shape) for t in leaves], state, "pad_across_processes")
    padded = []
    for index, tensor in enumerate(leaves):
        axis = dim + tensor.ndim if dim < 0 else dim
        if getattr(tensor, "is_nested", False) or not 0 <= axis < tensor.ndim:
            padded.append(tensor)
            continue
        longest = max(theirs[index][axis] for theirs in shapes)
        padded.append(_pad(tensor, axis, longest, pad_index, pad_first))
    return rebuild(data, padded)


def _pad(tensor: torch.Tensor, axis: int, size: int, pad_index: Any, pad_first: bool) -> torch.Tensor:
    """`tensor` grown to `size` along `axis`, the new places filled with `pad_index`."""
    if tensor.shape[axis] == size:
        return tensor
    shape = list(tensor.shape)
    shape[axis] = size
    if isinstance(pad_index, torch.Tensor):
        grown = tensor.new_zeros(shape) + pad_index.to(tensor.device)
    else:
        grown = tensor.new_full(shape, pad_index)
    start = size - tensor.shape[axis] if pad_first else 0
    grown.narrow(axis, start, tensor.shape[axis]).copy_(tensor)
    return grown


def _check_only_tensors(data: Any) -> None:
    """Raise TypeError at the first leaf of a nested tuple/list/dict that is not a tensor."""
    if isinstance(data, torch.Tensor):
        return
    if isinstance(data, (tuple, list)):
        for item in data:
            _check_only_tensors(item)
        return
    if isinstance(data, dict):
        for item in data.values():
            _check_only_tensors(item)
        return
    raise TypeError(
        f"pad_across_processes got a {type(data).__name__} ({data!r:.60}); it pads a tensor or a nested "
        "tuple/list/dict of tensors only."
    )
