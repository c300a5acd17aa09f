"""Apply a function to every tensor in a nested structure of tuples, lists and dicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], obj: Any) -> Any:
    """Return `obj` with `fn` applied to each tensor; containers keep their type."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        items = [map_tensors(fn, item) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, list):
        return [map_tensors(fn, item) for item in obj]
    if isinstance(obj, dict):
        return type(obj)((key, map_tensors(fn, value)) for key, value in obj.items())
    return obj
