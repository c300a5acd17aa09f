"""`send_to_device`: move every tensor of a nested structure to a device (Accelerate's function)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch


def send_to_device(
    tensor: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: str | Sequence[str] | None = None,
) -> Any:
    """`tensor` with everything that has a `.to()` (tensors, Hugging Face BatchEncodings, modules)
    moved to `device`, inside any nesting of lists, tuples (named ones too) and mappings, which keep
    their types. Values under `skip_keys` in a mapping stay where they are; other objects pass through."""
    if hasattr(tensor, "to"):
        try:
            return tensor.to(device, non_blocking=non_blocking)
        except TypeError:  # a .to() that takes no non_blocking
            return tensor.to(device)
    if isinstance(tensor, (list, tuple)):
        items = [send_to_device(item, device, non_blocking, skip_keys) for item in tensor]
        return type(tensor)(*items) if hasattr(tensor, "_fields") else type(tensor)(items)
    if isinstance(tensor, Mapping):
        skipped = {skip_keys} if isinstance(skip_keys, str) else set(skip_keys or ())
        return type(tensor)(  # type: ignore[call-arg]  # a mapping type built from a dict (dict, BatchEncoding, ...)
            {key: value if key in skipped else send_to_device(value, device, non_blocking, skip_keys)
             for key, value in tensor.items()}
        )
    return tensor
