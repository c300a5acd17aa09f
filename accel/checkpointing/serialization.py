"""Reading and writing the checkpoint's files in formats that cannot run code when loaded:
safetensors for weights, and torch.save files that torch.load(weights_only=True) reads."""

from __future__ import annotations

import pickle
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.writer import write_file, write_path

_SAFE_LEAVES = (type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device)
_SAFE_CONTAINERS = (dict, OrderedDict, list, tuple, set)
_SAFE_TENSORS = (torch.Tensor, torch.nn.Parameter)


def check_safe(value: Any, where: str) -> None:
    """Raise TypeError naming the first part of `value` that torch.load(weights_only=True) would
    refuse, so that save_state never writes a file that could not be loaded safely."""
    kind = type(value)
    if kind in _SAFE_LEAVES or kind in _SAFE_TENSORS:
        return
    if kind not in _SAFE_CONTAINERS:
        raise TypeError(
            f"save_state cannot save {where}: it is a {kind.__module__}.{kind.__qualname__}, and checkpoints hold "
            "only tensors, numbers, strings, None and lists/tuples/dicts of them (so that loading never runs "
            "code). Make that state_dict() return such values (a tensor or a float instead, say)."
        )
    if isinstance(value, dict):
        for key, item in value.items():
            check_safe(key, f"{where} (key {key!r})")
            check_safe(item, f"{where}[{key!r}]")
    else:
        for index, item in enumerate(value):
            check_safe(item, f"{where}[{index}]")


def save_torch(value: Any, path: Path) -> None:
    """Write `value` (already checked by `check_safe`) with torch.save and sync it."""
    write_file(path, lambda file: torch.save(value, file))


_FOREIGN = (
    "accel never writes such files: this one was replaced or written by something else. Do not trust this "
    "checkpoint; load another."
)


def load_torch(path: Path, label: str, allowed: Sequence[Any] = (), refused: str = _FOREIGN) -> Any:
    """torch.load(weights_only=True): a file that would need code to rebuild is refused unrun.

    `allowed` adds classes and functions the file may name (torch.serialization.safe_globals, for
    this load only); `refused` ends the error raised for a file that names anything else.
    """
    try:
        with warnings.catch_warnings(), torch.serialization.safe_globals(list(allowed)):
            warnings.filterwarnings("ignore", message="Detected pickle protocol")  # noise next to the error below
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{label}: {path.name} holds objects that only running code could rebuild, so it was refused "
            f"and nothing in it ran (torch.load(weights_only=True): {_unpickler_reason(exc)}). {refused}"
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{label}: {path.name} cannot be read ({_first_line(exc)}); it is damaged.") from exc


def save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write `tensors` as safetensors and sync the file."""
    write_path(path, lambda target: save_file(tensors, str(target), metadata={"format": "pt"}))


def load_tensors(path: Path, label: str) -> dict[str, torch.Tensor]:
    """Read a safetensors file onto the CPU."""
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{label}: {path.name} cannot be read ({_first_line(exc)}); it is damaged.") from exc


def tensor_shapes(path: Path, label: str) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the tensors in a safetensors file, read from its header only."""
    try:
        with safe_open(path, framework="pt") as file:
            return {name: tuple(file.get_slice(name).get_shape()) for name in file.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{label}: {path.name} cannot be read ({_first_line(exc)}); it is damaged.") from exc


def _unpickler_reason(error: BaseException) -> str:
    """The line of torch's weights_only error that says what was refused (the rest is advice to load
    the file unsafely, which is the wrong advice here)."""
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker in text:
        reason = next((line.strip() for line in text.split(marker, 1)[1].splitlines() if line.strip()), "")
        if reason:
            return reason
    return type(error).__name__


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
