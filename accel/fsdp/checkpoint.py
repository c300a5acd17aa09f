"""Sharded checkpoints of a sharded model and its optimizer, with torch.distributed.checkpoint.

`save_sharded` has each process write its own shards into one folder (`__<rank>_0.distcp`
files and a `.metadata` index written by the main process); nothing is gathered. The optimizer
state is keyed by parameter name, not by position, so `load_sharded` can read the folder with
any number of processes (resharding), an unsharded model in one process included. Loading runs
no code from the files (safe_reading.py: torch's own reader would unpickle them).

    save_sharded(folder, model, optimizer)     # on every process
    load_sharded(folder, model, optimizer)     # on every process, any number of them

`consolidate` writes the model's weights of a sharded checkpoint as one model.safetensors, in
one process (also `python -m accel.fsdp.consolidate CHECKPOINT_DIR OUTPUT_DIR`).

The FULL_STATE_DICT helpers gather the optimizer state on the main process instead, for the
checkpoint layout that stores one file of each.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from accel.fsdp.safe_reading import SafeLoadPlanner, SafeReader, read_metadata

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import ValueType

MODEL_KEY = "model"
OPTIMIZER_KEY = "optimizer"
METADATA_NAME = ".metadata"
WEIGHTS_NAME = "model.safetensors"
_SHOWN = 8


def consolidate(sharded_dir: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> Path:
    """Write the full model weights of the sharded checkpoint in `sharded_dir` to `output_dir/model.safetensors`.

    Returns the file's path. Raises FileNotFoundError when no sharded checkpoint is found and
    ValueError when it holds no model weights.
    """
    folder = find_sharded_folder(sharded_dir)
    reader = SafeReader(folder)
    entries = reader.read_metadata().state_dict_metadata
    prefix = MODEL_KEY + "."
    state = {
        name: torch.empty(tuple(entry.size), dtype=entry.properties.dtype)
        for name, entry in entries.items()
        if name.startswith(prefix) and isinstance(entry, TensorStorageMetadata)
    }
    if not state:
        raise ValueError(
            f"consolidate: the sharded checkpoint in {str(folder)!r} holds no model weights (no key starts with "
            f"{prefix!r}); it was not written by accel's save_sharded / save_state."
        )
    with quiet_single_process():
        dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    target = output / WEIGHTS_NAME
    save_file({name.removeprefix(prefix): t.contiguous() for name, t in state.items()}, target)
    return target


def find_sharded_folder(path: str | os.PathLike[str]) -> Path:
    """`path` itself when it holds `.metadata`, else its one subfolder that does."""
    folder = Path(path)
    if (folder / METADATA_NAME).is_file():
        return folder
    found = sorted(p.parent for p in folder.glob(f"*/{METADATA_NAME}")) if folder.is_dir() else []
    if len(found) == 1:
        return found[0]
    detail = (
        f"it has several: {', '.join(p.name for p in found)}; give one of them"
        if found
        else f"neither it nor a subfolder holds {METADATA_NAME} (written by torch.distributed.checkpoint)"
    )
    if not found and (folder / WEIGHTS_NAME).is_file():
        detail += f"; it holds {WEIGHTS_NAME} already (saved with FULL_STATE_DICT): use that file"
    raise FileNotFoundError(f"consolidate: {str(folder)!r} is not a sharded checkpoint: {detail}.")


def save_sharded(folder: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Write this process's shards of `model` (and `optimizer`'s state) into `folder`.

    Every process must call it with the same folder (a shared filesystem across machines).
    `optimizer` may be accel's prepared optimizer or the one inside it.
    """
    state = _state(model, optimizer)
    dcp.save(state, checkpoint_id=Path(folder), no_dist=not dist.is_initialized())


def load_sharded(folder: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Load what `save_sharded` wrote into `model` (and `optimizer`), sharded as they are now.

    Raises FileNotFoundError when `folder` holds no sharded checkpoint and ValueError, before
    anything is loaded, when its weights' names or shapes differ from the model's.
    """
    folder = Path(folder)
    problems = sharded_weight_problems(folder, model)
    if problems:
        raise ValueError(
            f"load_state: the sharded checkpoint in {str(folder)!r} does not fit this model: {'; '.join(problems)}. "
            "Build the model exactly as when the checkpoint was saved (same classes and sizes), or load a checkpoint "
            "of this model."
        )
    state = _state(model, optimizer)
    with quiet_single_process():
        dcp.load(state, storage_reader=SafeReader(folder), planner=SafeLoadPlanner(), no_dist=not dist.is_initialized())
    raw = _raw(optimizer)
    if raw is None:
        set_model_state_dict(model, state[MODEL_KEY])
    else:
        set_state_dict(model, raw, model_state_dict=state[MODEL_KEY], optim_state_dict=state[OPTIMIZER_KEY])


def saved_tensor_shapes(folder: str | os.PathLike[str], key: str = MODEL_KEY) -> dict[str, tuple[int, ...]]:
    """The full (unsharded) shape of every tensor saved under `key` (the model's weights by default)."""
    folder = Path(folder)
    if not (folder / METADATA_NAME).is_file():
        raise FileNotFoundError(
            f"{str(folder)!r} is not a sharded checkpoint: it has no {METADATA_NAME} file (written by "
            "torch.distributed.checkpoint). Give the folder that save_state wrote the model's shards into."
        )
    metadata = read_metadata(folder)
    prefix = key + "."
    return {
        name.removeprefix(prefix): tuple(entry.size)
        for name, entry in metadata.state_dict_metadata.items()
        if name.startswith(prefix) and isinstance(entry, TensorStorageMetadata)
    }


def sharded_weight_problems(folder: str | os.PathLike[str], model: nn.Module) -> list[str]:
    """What differs between the saved weights' names/shapes and the model's; empty when they fit."""
    saved = saved_tensor_shapes(folder)
    state = cast(dict[str, torch.Tensor], get_model_state_dict(model))  # its parameters and buffers: tensors
    expected = {name: tuple(tensor.shape) for name, tensor in state.items()}
    problems = []
    missing = [name for name in expected if name not in saved]
    unexpected = [name for name in saved if name not in expected]
    reshaped = [f"{n} (checkpoint {saved[n]}, model {s})" for n, s in expected.items() if n in saved and saved[n] != s]
    for what, names in (("missing from the checkpoint", missing), ("not in this model", unexpected),
                        ("with other shapes", reshaped)):
        if names:
            more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
            problems.append(f"weights {what}: {', '.join(names[:_SHOWN])}{more}")
    return problems


def full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """`optimizer`'s full state keyed by parameter name, on the CPU, on the main process (others: empty).

    For state_dict_type='FULL_STATE_DICT'; every process must call it (the shards are gathered).
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, _raw(optimizer), options=options)


def load_full(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    model_state: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any] | None = None,
) -> None:
    """Load full (unsharded) weights and optimizer state into a sharded model: each process keeps its shards.

    Every process must call it, each with the full dicts (as `full_state_dict` and
    `full_optimizer_state_dict` returned them on the main process).
    """
    options = StateDictOptions(full_state_dict=True, strict=True)
    raw = _raw(optimizer)
    # torch's parameter is a dict (invariant) of its ValueType union, of which a tensor is one
    weights = cast("dict[str, ValueType]", model_state)
    if raw is None or optimizer_state is None:
        set_model_state_dict(model, weights, options=options)
    else:
        set_state_dict(model, raw, model_state_dict=weights, optim_state_dict=optimizer_state, options=options)


@contextlib.contextmanager
def quiet_single_process() -> Iterator[None]:
    """Silence torch's warning that it loads in a single process: here that is asked for (no_dist)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _state(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    raw = _raw(optimizer)
    if raw is None:
        return {MODEL_KEY: get_model_state_dict(model)}
    model_state, optimizer_state = get_state_dict(model, raw)
    return {MODEL_KEY: model_state, OPTIMIZER_KEY: optimizer_state}


@overload
def _raw(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer: ...


@overload
def _raw(optimizer: None) -> None: ...


def _raw(optimizer: torch.optim.Optimizer | None) -> torch.optim.Optimizer | None:
    """The torch optimizer inside accel's prepared one (which shares its state), or `optimizer` itself."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer
