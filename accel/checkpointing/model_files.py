"""A model's weights as files that transformers and Accelerate read: one file, or shards plus an index.

safetensors by default (`model.safetensors`, or `model-00001-of-0000N.safetensors` with
`model.safetensors.index.json`); with `safe_serialization=False`, `pytorch_model.bin` (or shards
with `pytorch_model.bin.index.json`) written by torch.save from plain tensors only, so that
`torch.load(path, weights_only=True)` reads it without running code.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import torch

from accel.checkpointing.safetensors_io import without_shared

logger = logging.getLogger(__name__)

SAFE_NAME = "model.safetensors"
PICKLE_NAME = "pytorch_model.bin"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(argument: str, value: int | str) -> int:
    """Bytes from an int or a string such as "10GB", "500MB" or "2GiB" (GB = 10**9, GiB = 2**30)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]I?B|B)?\s*", str(value), re.IGNORECASE)
    if isinstance(value, str) and match:
        size = int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])
        if size > 0:
            return size
    raise ValueError(
        f"{argument}={value!r} is not accepted: give a size in bytes (an int > 0) or a string such as "
        "'10GB', '500MB' or '2GiB'."
    )


def write_model_files(
    state_dict: dict[str, torch.Tensor], directory: Path, max_shard_size: int, safe_serialization: bool
) -> list[Path]:
    """Write `state_dict` into `directory` (shared tensors once); return the files written.

    Tensors are packed in order into shards of at most `max_shard_size` bytes (a tensor larger
    than that gets a shard of its own). Files left by an earlier save under the same naming
    scheme are removed first, so that an index never mixes two saves.
    """
    tensors = without_shared(state_dict)
    base = SAFE_NAME if safe_serialization else PICKLE_NAME
    _remove_earlier(directory, base)
    shards = _shards(tensors, max_shard_size)
    names = [_shard_name(base, i, len(shards)) for i in range(len(shards))]
    written = [_write(shard, directory / name, safe_serialization) for shard, name in zip(shards, names)]
    if len(shards) > 1:
        weight_map = {key: name for shard, name in zip(shards, names) for key in shard}
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        path = directory / f"{base}.index.json"
        path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


def _shards(tensors: dict[str, torch.Tensor], max_shard_size: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def _shard_name(base: str, index: int, count: int) -> str:
    if count == 1:
        return base
    stem, suffix = base.rsplit(".", 1)
    return f"{stem}-{index + 1:05d}-of-{count:05d}.{suffix}"


def _write(tensors: dict[str, torch.Tensor], path: Path, safe_serialization: bool) -> Path:
    if safe_serialization:
        from safetensors.torch import save_file

        save_file(tensors, str(path), metadata={"format": "pt"})
    else:
        torch.save({name: tensor.cpu() for name, tensor in tensors.items()}, path)
    return path


def _remove_earlier(directory: Path, base: str) -> None:
    stem, suffix = base.rsplit(".", 1)
    earlier = [*directory.glob(f"{stem}-*-of-*.{suffix}"), directory / base, directory / f"{base}.index.json"]
    for path in earlier:
        if path.is_file():
            path.unlink()


def write_object(obj: Any, f: str | Path, safe_serialization: bool) -> None:
    """Accelerate's `save`: torch.save, or with `safe_serialization` a safetensors file, for which
    `obj` must be a dict of tensors (anything else raises, naming what was given)."""
    if not safe_serialization:
        torch.save(obj, f)
        return
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise TypeError(
            f"save(safe_serialization=True) writes a dict of tensors, got {type(obj).__name__}; pass a "
            "state_dict(), or safe_serialization=False for other objects."
        )
    from safetensors.torch import save_file

    kept = without_shared(obj)
    if len(kept) < len(obj):  # tied weights: safetensors refuses two names for one memory
        dropped = sorted(set(obj) - set(kept))
        logger.warning(
            "Removed shared tensor %s while saving %s: they share memory with tensors that were written (tied "
            "weights); tie them again after loading (as transformers' tie_weights() does).", dropped, f,
        )
    save_file(kept, str(f), metadata={"format": "pt"})
