"""Accelerate's helpers for nested structures of tensors (`accelerate.utils.operations`).

A structure is any nesting of lists, tuples (named ones too) and mappings around leaves; these
functions rebuild it with the same container types, changing only the leaves they select.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from accel.backends.base import ForwardWrapper

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def is_torch_tensor(tensor: Any) -> bool:
    """True for a torch.Tensor (the default leaf test of `recursively_apply`)."""
    return isinstance(tensor, torch.Tensor)


def is_namedtuple(data: Any) -> bool:
    """True for an instance of a namedtuple class (`collections.namedtuple` or `typing.NamedTuple`,
    subclasses included); a plain tuple that only looks like one by having `_asdict` and `_fields`
    passes too, as in Accelerate."""
    return isinstance(data, tuple) and hasattr(data, "_asdict") and hasattr(data, "_fields")


def honor_type(obj: Any, generator: Iterable[Any]) -> Any:
    """The items of `generator` in a container of `obj`'s type: a namedtuple takes its fields as
    positional arguments, any other list or tuple type takes the iterable."""
    if is_namedtuple(obj):
        return type(obj)(*generator)
    return type(obj)(generator)


def recursively_apply(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    test_type: Callable[[Any], bool] = is_torch_tensor,
    error_on_other_type: bool = False,
    **kwargs: Any,
) -> Any:
    """`data` with `func(leaf, *args, **kwargs)` in place of every leaf for which `test_type` is true.

    Lists, tuples and mappings are rebuilt with their own types. Other leaves are kept as they are,
    or, with `error_on_other_type=True`, make it raise TypeError (callers that can only handle
    tensors say so at once instead of passing a wrong object on).
    """
    if isinstance(data, (tuple, list)):
        return honor_type(data, (
            recursively_apply(func, item, *args, test_type=test_type, error_on_other_type=error_on_other_type, **kwargs)
            for item in data
        ))
    if isinstance(data, Mapping):
        return type(data)({  # type: ignore[call-arg]  # a mapping type built from a dict (dict, OrderedDict, ...)
            key: recursively_apply(func, value, *args, test_type=test_type, error_on_other_type=error_on_other_type, **kwargs)
            for key, value in data.items()
        })
    if test_type(data):
        return func(data, *args, **kwargs)
    if error_on_other_type:
        raise TypeError(
            f"Unsupported types ({type(data)}) passed to `{getattr(func, '__name__', func)}`. Only nested "
            f"list/tuple/dicts of objects that are valid for `{getattr(test_type, '__name__', test_type)}` "
            "should be passed."
        )
    return data


def find_device(data: Any) -> torch.device | None:
    """The device of the first tensor found in `data` (depth first), or None when it holds none."""
    if isinstance(data, Mapping):
        data = list(data.values())
    if isinstance(data, (tuple, list)):
        for item in data:
            device = find_device(item)
            if device is not None:
                return device
        return None
    return data.device if isinstance(data, torch.Tensor) else None


def _tensor_to_list(tensor: torch.Tensor) -> Any:
    """`tensor`'s values as (nested) Python numbers; bf16 goes through fp32, which NumPy and
    `tolist` handle."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.tolist()


def listify(data: Any) -> Any:
    """`data` with each tensor replaced by its values as a (nested) list of Python numbers."""
    return recursively_apply(_tensor_to_list, data)


def concatenate(data: list[Any] | tuple[Any, ...], dim: int = 0) -> Any:
    """One structure from a list of structures of the same shape: their tensors concatenated along
    `dim`, position by position. A list of one non-tensor item gives that item; any other
    non-tensor leaf raises TypeError."""
    first = data[0]
    if isinstance(first, (tuple, list)):
        return honor_type(first, (concatenate([item[i] for item in data], dim=dim) for i in range(len(first))))
    if isinstance(first, Mapping):
        return type(first)(  # type: ignore[call-arg]  # as in recursively_apply
            {key: concatenate([item[key] for item in data], dim=dim) for key in first.keys()}
        )
    if isinstance(first, torch.Tensor):
        return torch.cat(data, dim=dim)
    if isinstance(data, (tuple, list)) and len(data) == 1:
        return first
    raise TypeError(f"Can only concatenate tensors but got {type(first)}")


def _is_half_tensor(tensor: Any) -> bool:
    """True for a tensor (or tensor-like object with a dtype) in fp16 or bf16."""
    return (isinstance(tensor, torch.Tensor) or hasattr(tensor, "dtype")) and tensor.dtype in _HALF_DTYPES


def _to_float(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float()


def convert_to_fp32(tensor: Any) -> Any:
    """`tensor` (a nested structure) with its fp16 and bf16 tensors converted to fp32; tensors of
    other dtypes and non-tensors are kept as they are."""
    return recursively_apply(_to_float, tensor, test_type=_is_half_tensor)


class ConvertOutputsToFp32(ForwardWrapper):
    """`model_forward` whose fp16/bf16 outputs are returned as fp32 (see `convert_outputs_to_fp32`).

    A ForwardWrapper, as accel's own precision wrappers, so that a model whose forward it replaced
    can still be pickled, and `unwrap_model(model, keep_fp32_wrapper=False)` (or
    `extract_model_from_parallel`) puts the original forward back. (Accelerate's wrapper refuses
    to be pickled.)
    """

    def __init__(self, model_forward: Callable[..., Any]) -> None:
        super().__init__(model_forward)
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.__wrapped__(*args, **kwargs))


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> Callable[..., Any]:
    """`model_forward` wrapped so that its fp16/bf16 outputs come back as fp32; usable as a
    decorator or as `model.forward = convert_outputs_to_fp32(model.forward)`. The original is
    the wrapper's `__wrapped__`."""
    return ConvertOutputsToFp32(model_forward)


def _pad_rows(tensor: torch.Tensor, batch_size: int, num_processes: int, dim: int = 0) -> torch.Tensor:
    """`tensor` with zero rows appended along `dim`, as many as Accelerate's rule gives (see
    `pad_input_tensors`)."""
    per_process, leftover = divmod(batch_size, num_processes)
    to_pad = num_processes - batch_size if per_process == 0 else num_processes - per_process
    if leftover > to_pad and to_pad < 1:
        to_pad = leftover - to_pad
    new_shape = list(tensor.shape)
    new_shape[dim] = batch_size + to_pad
    padded = tensor.new_zeros(new_shape)
    padded.narrow(dim, 0, tensor.shape[dim]).copy_(tensor)
    return padded


def pad_input_tensors(tensor: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Each tensor of `tensor` (a nested structure of tensors only; anything else raises TypeError)
    with zero rows appended along `dim` so that its `batch_size` rows can be split over
    `num_processes` (as Accelerate's pipeline-parallel inference pads its inputs).

    The number of rows added follows Accelerate's rule exactly, so shapes match it: with
    `q, r = divmod(batch_size, num_processes)`, `num_processes - batch_size` rows when `q == 0`,
    else `num_processes - q` (or `r - (num_processes - q)` when that is below 1 and `r` larger).
    E.g. 3 rows for 4 processes become 4, 4 rows for 3 processes become 6, 61 for 6 become 66.
    (Accelerate sizes dimension 0 even for another `dim`; here `dim` itself is padded.)
    """
    return recursively_apply(
        _pad_rows, tensor, error_on_other_type=True, batch_size=batch_size, num_processes=num_processes, dim=dim
    )


def _take_slice(tensor: torch.Tensor, tensor_slice: Any) -> torch.Tensor:
    return tensor[tensor_slice]


def slice_tensors(data: Any, tensor_slice: Any, process_index: int | None = None,
                  num_processes: int | None = None) -> Any:
    """`data` with every tensor indexed by `tensor_slice` (a slice, or any index a tensor takes).
    `process_index` and `num_processes` are accepted, and unused, as in Accelerate."""
    return recursively_apply(_take_slice, data, tensor_slice)
