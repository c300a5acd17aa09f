"""Samples and tokens of one model call, read from the arguments the model is called with."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

LengthFn = Callable[[Any], int]


def _first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor in `value` (a tensor, or a list/tuple/dict holding tensors), depth first."""
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def _token_ids(args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    """The token ids of a call: the `input_ids` keyword, else an integer first argument (a GPT's `model(tokens)`)."""
    ids = kwargs.get("input_ids")
    if isinstance(ids, torch.Tensor):
        return ids
    first = args[0] if args else None
    if isinstance(first, torch.Tensor) and not first.is_floating_point() and not first.is_complex():
        return first
    return None


def count_call(args: Sequence[Any], kwargs: Mapping[str, Any], length_fn: LengthFn | None) -> tuple[int, int]:
    """(samples, tokens) of `model(*args, **kwargs)`: samples are the first dimension of the first tensor;
    tokens are `length_fn(batch)` (batch: the one positional argument, else the keyword arguments), else the
    size of the token ids, else 0.

    Example: `count_call((), {"input_ids": torch.zeros(4, 128, dtype=torch.long)}, None)` is (4, 512).
    """
    first = _first_tensor(args) if args else _first_tensor(kwargs)
    samples = int(first.shape[0]) if first is not None and first.dim() > 0 else 0
    if length_fn is not None:
        batch = args[0] if len(args) == 1 and not kwargs else dict(kwargs) if not args else (tuple(args), dict(kwargs))
        return samples, int(length_fn(batch))
    ids = _token_ids(args, kwargs)
    return samples, 0 if ids is None else ids.numel()
