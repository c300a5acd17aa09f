"""Loading the models and optimizers of a checkpoint where FSDP is involved, on either side.

The checkpoint decides how it is read, not the run: its `shards/` (a SHARDED_STATE_DICT
checkpoint) load into sharded and plain models alike, on any number of processes; full weights
(`model.safetensors`) load into a sharded model by each process keeping its shards; an optimizer
state keyed by parameter name (saved under FSDP) or by position (saved without) loads into either.
Reading runs no code from the files (accel.fsdp.safe_reading). Sharded reads go into new tensors
laid out as the live ones, so that every check is done before anything is changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from accel._tree import map_tensors
from accel.checkpointing import layout
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.manifest import Manifest
from accel.checkpointing.models import shape_problems as differences
from accel.checkpointing.sharded import owner
from accel.fsdp.checkpoint import quiet_single_process
from accel.fsdp.safe_reading import SafeLoadPlanner, SafeReader, read_metadata

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

METADATA = f"{layout.SHARDS_DIR}/.metadata"
_FULL = StateDictOptions(full_state_dict=True, strict=False)
"""Full (unsharded) dicts that every process holds whole; tied weights are saved once, hence not strict."""


def _target(accelerator: CheckpointHost, model: nn.Module) -> nn.Module:
    return accelerator.unwrap_model(model, keep_torch_compile=False)


def fsdp_problems(accelerator: CheckpointHost, manifest: Manifest) -> list[str]:
    """A checkpoint saved inside an accumulation window holds whole gradients, which a sharded run
    cannot take back (FSDP's partial sums are its own): refuse it, saying what to load instead."""
    if not accelerator.strategy.shards_parameters or manifest.gradient_accumulation["micro_batch"] == 0:
        return []
    return [
        "it was saved inside a gradient accumulation window, with the gradients accumulated so far, and a run with "
        "fsdp_plugin cannot take those back into FSDP's unsharded accumulation; resume it without fsdp_plugin, or "
        "from a checkpoint saved after an optimizer step"
    ]


def shape_problems(accelerator: CheckpointHost, folder: Path, models: list[int], label: str) -> list[str]:
    """What differs between the models' weights and the sharded checkpoint's (names, full shapes),
    read from its index alone: nothing is loaded yet."""
    try:
        entries = read_metadata(folder / layout.SHARDS_DIR).state_dict_metadata
    except Exception as exc:
        raise CheckpointError(f"{label}: {METADATA} cannot be read safely ({exc}); it is damaged.") from exc
    problems = []
    for index in models:
        prefix = layout.model_key(index) + "."
        saved = {
            name.removeprefix(prefix): tuple(entry.size)
            for name, entry in entries.items()
            if name.startswith(prefix) and isinstance(entry, TensorStorageMetadata)
        }
        model = _target(accelerator, accelerator.prepared.models[index])
        state = cast(dict[str, torch.Tensor], get_model_state_dict(model))  # its parameters and buffers: tensors
        live = {name: tuple(t.shape) for name, t in state.items()}
        problems += [f"model {index}: {problem}" for problem in differences(live, saved)]
    if problems:
        problems.append("build each model as it was when the checkpoint was saved (same classes and sizes), or load a "
                        "checkpoint of these models")
    return problems


def check_shard_files(folder: Path, manifest: Manifest, label: str) -> None:
    """Raise CheckpointError, before anything is read, when the sharded index refers to files the
    manifest does not list: a checkpoint published (by an older accel) without some process's
    shards, which torch would report only midway through loading, as a bare FileNotFoundError."""
    try:
        storage = read_metadata(folder / layout.SHARDS_DIR).storage_data
    except Exception as exc:
        raise CheckpointError(f"{label}: {METADATA} cannot be read safely ({exc}); it is damaged.") from exc
    names = {f"{layout.SHARDS_DIR}/{info.relative_path}" for info in (storage or {}).values()}
    missing = sorted(name for name in names if name not in manifest.files)
    if missing:
        raise CheckpointError(
            f"{label} is incomplete: its shard index refers to {', '.join(missing)}, which its manifest does not list. "
            "It was published without some processes' shards (saved on machines that did not share a file system, "
            "by an accel that did not check before publishing) and cannot be loaded. Load an older checkpoint."
        )


def read_shards(accelerator: CheckpointHost, folder: Path, models: list[int], label: str) -> dict[str, Any]:
    """This process's part of the sharded checkpoint, in new tensors laid out as its models (`models`,
    by index) and optimizers are now; raises CheckpointError, having changed nothing, when it differs."""
    saved = read_metadata(folder / layout.SHARDS_DIR).state_dict_metadata
    state: dict[str, Any] = {}
    for index in models:
        live = get_model_state_dict(_target(accelerator, accelerator.prepared.models[index]))
        state[layout.model_key(index)] = map_tensors(torch.empty_like, live)
    names = {}
    for index, wrapped in enumerate(accelerator.prepared.optimizers):
        live_state = _live_optimizer_state(owner(accelerator, index), wrapped.optimizer)
        names[index] = [list(group["params"]) for group in live_state["param_groups"]]
        if not any(key.startswith(f"{layout.optimizer_key(index)}.state.") for key in saved):
            live_state = {**live_state, "state": {}}  # saved before its first step (sharded.by_name_state)
        state[layout.optimizer_key(index)] = map_tensors(torch.empty_like, live_state)
    try:
        reader = SafeReader(folder / layout.SHARDS_DIR)
        with quiet_single_process():
            dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=not dist.is_initialized())
    except Exception as exc:
        raise CheckpointError(f"{label}: reading {layout.SHARDS_DIR}/ failed: {_first_line(exc)}") from exc
    problems = []
    for index, live_names in names.items():
        groups = [list(group["params"]) for group in state[layout.optimizer_key(index)]["param_groups"]]
        if groups != live_names:
            problems.append(f"optimizer {index}: its parameters (by name, per group) differ from the checkpoint's")
    if problems:
        raise CheckpointError(f"{label} does not fit this training setup: " + "; ".join(problems) + ".")
    return state


def _live_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state keyed by name. torch fills an empty state with a zero-step to get its
    layout; that state is emptied again, so that a failed load leaves the optimizer as it was."""
    was_empty = not optimizer.state
    state = get_optimizer_state_dict(model, optimizer)
    if was_empty:
        state = map_tensors(torch.empty_like, state)
        optimizer.state.clear()
    return state


def apply_shards(accelerator: CheckpointHost, state: dict[str, Any], models: list[int]) -> None:
    """Put what `read_shards` read into the models and optimizers."""
    for index in models:
        set_model_state_dict(_target(accelerator, accelerator.prepared.models[index]), state[layout.model_key(index)])
    for index, wrapped in enumerate(accelerator.prepared.optimizers):
        set_optimizer_state_dict(owner(accelerator, index), wrapped.optimizer, state[layout.optimizer_key(index)])


def load_optimizer(accelerator: CheckpointHost, index: int, state: dict[str, Any], by_name: bool) -> None:
    """A saved optimizer.pt into prepared optimizer `index`: keyed by name (saved under FSDP) or by
    position (saved without), into an optimizer of a sharded or a plain model."""
    wrapped = accelerator.prepared.optimizers[index]
    if not by_name and not accelerator.strategy.shards_parameters:
        wrapped.load_state_dict(state)
        return
    model = owner(accelerator, index)
    if not by_name:
        state = _by_name(model, wrapped.optimizer, state)
    set_optimizer_state_dict(model, wrapped.optimizer, state, options=_FULL)
    if not state["state"]:  # saved before its first step: torch's layout step is not part of it
        wrapped.optimizer.state.clear()


def _by_name(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """A positional optimizer state_dict keyed by the names of the parameters in those positions."""
    live = _live_optimizer_state(model, optimizer)
    ordered = [name for group in live["param_groups"] for name in group["params"]]
    return {
        "state": {ordered[position]: value for position, value in state["state"].items()},
        "param_groups": [{**group, "params": [ordered[p] for p in group["params"]]} for group in state["param_groups"]],
    }


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
