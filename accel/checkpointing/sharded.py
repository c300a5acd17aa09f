"""Checkpoints of an FSDP run: the models and optimizers as every process's shards, or gathered.

With the plugin's state_dict_type='SHARDED_STATE_DICT' (the default), every process writes its
own shards of every prepared model and optimizer with torch.distributed.checkpoint into the
checkpoint's `shards/` subfolder (one DCP checkpoint: `model.<name>`, `optimizer.<...>`,
`model_1.<name>`, ...); nothing is gathered. With 'FULL_STATE_DICT' the main process gathers
them into the usual `model.safetensors` and `optimizer.pt`. Either way the optimizer state is
keyed by parameter name (torch's distributed state-dict form), so it loads onto any number of
processes, sharded or not, and the manifest's `fsdp` field says so.

This file saves; sharded_load.py loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from accel.checkpointing import layout
from accel.checkpointing.manifest import Manifest
from accel.fsdp.checkpoint import METADATA_NAME, quiet_single_process

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

_GATHERED = StateDictOptions(full_state_dict=True, cpu_offload=True)
"""FULL_STATE_DICT: the whole state on the main process's CPU (the others get an empty dict)."""


def is_sharded_checkpoint(manifest: Manifest) -> bool:
    """True for a checkpoint whose models and optimizers are in `shards/`."""
    return manifest.fsdp is not None and manifest.fsdp["state_dict_type"] == "SHARDED_STATE_DICT"


def refuse_inside_window(accelerator: CheckpointHost) -> None:
    """Under FSDP the gradients of a window are unsharded partial sums that no process holds whole:
    refuse to save them rather than write a checkpoint that cannot continue the window exactly."""
    state = accelerator.gradient_state
    if accelerator.strategy.shards_parameters and state.step != 0:
        raise ValueError(
            f"save_state under sharded training ({accelerator.strategy.name}) was called inside a gradient accumulation "
            f"window (micro-batch {state.step} of {state.num_steps}), where the "
            "accumulated gradients are partial sums no process holds whole, which cannot be saved. Call save_state after "
            "the optimizer step of a window, when accelerator.sync_gradients is True."
        )


def _target(accelerator: CheckpointHost, model: nn.Module) -> nn.Module:
    return accelerator.unwrap_model(model, keep_torch_compile=False)


def owner(accelerator: CheckpointHost, index: int) -> nn.Module:
    """The (unwrapped) prepared model holding every parameter of prepared optimizer `index`."""
    raw = accelerator.prepared.optimizers[index].optimizer
    wanted = {id(p) for group in raw.param_groups for p in group["params"]}
    for model in accelerator.prepared.models:
        target = _target(accelerator, model)
        if wanted <= {id(p) for p in target.parameters()}:
            return target
    raise ValueError(
        f"save_state/load_state with fsdp_plugin: optimizer {index} updates parameters that no single prepared model "
        "holds, and under FSDP an optimizer's state is stored by the names of its model's parameters. Prepare the "
        "model it trains (give each model its own optimizer)."
    )


def optimizer_state(accelerator: CheckpointHost, index: int) -> dict[str, Any]:
    """Optimizer `index`'s state for optimizer.pt: keyed by parameter name and gathered on the main
    process under FSDP (every process must call it), its own state_dict() otherwise."""
    wrapped = accelerator.prepared.optimizers[index]
    if not accelerator.strategy.shards_parameters:
        return wrapped.state_dict()
    return by_name_state(owner(accelerator, index), wrapped.optimizer, _GATHERED)


def by_name_state(model: nn.Module, optimizer: torch.optim.Optimizer, options: StateDictOptions | None = None) -> Any:
    """torch's state dict of `optimizer` keyed by `model`'s parameter names, without its side effect:
    torch steps an optimizer that has no state yet (lr 0, zero gradients) to lay the state out, which
    would make a resumed AdamW count one step more. That state is dropped again, and saved as none."""
    was_empty = not optimizer.state
    state = get_optimizer_state_dict(model, optimizer, options=options)
    if was_empty:
        optimizer.state.clear()
        state = {**state, "state": {}}
    return state


def write_shards(accelerator: CheckpointHost, folder: Path) -> dict[str, int]:
    """Every process writes its shards of every prepared model and optimizer into `folder/shards`;
    returns what this process wrote as it sees it, manifest name (`shards/<file>`) -> size in bytes,
    for the main process to confirm before it publishes (visibility.py)."""
    state: dict[str, Any] = {
        layout.model_key(i): get_model_state_dict(_target(accelerator, m)) for i, m in enumerate(accelerator.prepared.models)
    }
    for index, wrapped in enumerate(accelerator.prepared.optimizers):
        state[layout.optimizer_key(index)] = by_name_state(owner(accelerator, index), wrapped.optimizer)
    writer = _RecordingWriter(folder / layout.SHARDS_DIR)
    with quiet_single_process():
        dcp.save(state, storage_writer=writer, no_dist=not dist.is_initialized())
    shards = folder / layout.SHARDS_DIR
    return {f"{layout.SHARDS_DIR}/{name}": (shards / name).stat().st_size for name in sorted(writer.written)}


class _RecordingWriter(dcp.FileSystemWriter):
    """torch's file writer, keeping the names of the files this process wrote: its data files, and
    `.metadata` when it is the process that writes the index."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.written: set[str] = set()

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        done = super().write_data(plan, planner)
        self.written.update(result.storage_data.relative_path for result in done.wait())
        return done

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        super().finish(metadata, results)
        self.written.add(METADATA_NAME)
