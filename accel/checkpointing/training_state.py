"""Collecting the training state to save, and putting a loaded state back.

Saving gathers everything first and checks that each part can be stored safely, before any
file is written. Loading reads and checks every file before it changes anything, then restores
in an order in which the likeliest failures (objects the user built differently) come first
and the RNG states come last.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel.checkpointing import layout
from accel.checkpointing.across_processes import averaged, own_files, per_process_objects, warn_no_rng
from accel.checkpointing.compat import contents_of, optimizer_problems, setup_problems
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.manifest import Manifest
from accel.checkpointing.models import (
    load_gradients,
    load_weights,
    model_gradients,
    model_weights,
    weight_problems,
)
from accel.checkpointing.rng import restore_rng
from accel.checkpointing.serialization import check_safe, load_tensors, load_torch, tensor_shapes
from accel.checkpointing.sharded import (
    is_sharded_checkpoint,
    optimizer_state,
    refuse_inside_window,
)
from accel.checkpointing.sharded_load import (
    METADATA,
    fsdp_problems,
    load_optimizer,
)

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Everything a checkpoint holds, gathered in memory (tensors are not copied)."""

    tensors: dict[str, dict[str, torch.Tensor]]
    """safetensors files: name -> tensors."""
    objects: dict[str, Any]
    """torch.save files (checked safe for weights_only loading): name -> value."""
    contents: dict[str, int]
    gradient_accumulation: dict[str, Any]
    dataloaders: list[dict[str, int]]


def collect(accelerator: CheckpointHost) -> Snapshot:
    """Gather the state to save; raises TypeError naming any part that cannot be stored safely.

    With several processes every process takes part (gradients and per-process state are
    exchanged), and every process ends with the whole snapshot.
    """
    refuse_inside_window(accelerator)
    gradient_state = accelerator.gradient_state
    inside_window = gradient_state.step != 0
    sharded = accelerator.strategy.sharded_checkpoints  # then the models and optimizers go to shards/, each process its own
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for index, model in enumerate(accelerator.prepared.models):
        if not sharded:
            tensors[layout.model_file(index)] = model_weights(accelerator, model)
        if inside_window:
            tensors[layout.gradients_file(index)] = averaged(model_gradients(accelerator, model), accelerator)
    described = _described_objects(accelerator, sharded)
    for value, what in described.values():
        check_safe(value, what)
    loaders = described[layout.dataloaders_file(0)][0]
    return Snapshot(
        tensors=tensors,
        objects={name: value for name, (value, _) in described.items()},
        contents=contents_of(accelerator),
        gradient_accumulation={
            "steps": gradient_state.num_steps,
            "micro_batch": gradient_state.step,
            "sync_gradients": gradient_state.sync_gradients,
        },
        dataloaders=[{"epoch": state["epoch"], "batch": state["batch"]} for state in loaders],
    )


def _described_objects(accelerator: CheckpointHost, sharded: bool) -> dict[str, tuple[Any, str]]:
    """File name -> (value, what it is, for errors) of everything saved with torch.save."""
    found: dict[str, tuple[Any, str]] = {}
    for index in range(0 if sharded else len(accelerator.prepared.optimizers)):
        found[layout.optimizer_file(index)] = (optimizer_state(accelerator, index), f"optimizer {index}'s state_dict()")
    for index, scheduler in enumerate(accelerator.prepared.schedulers):
        found[layout.scheduler_file(index)] = (scheduler.state_dict(), f"scheduler {index}'s state_dict()")
    for index, obj in enumerate(accelerator.prepared.registered):
        what = f"the state_dict() of registered object {index} ({type(obj).__name__})"
        found[layout.custom_file(index)] = (obj.state_dict(), what)
    found[layout.PRECISION_FILE] = (accelerator.precision.state_dict(), "the precision's state_dict()")
    found.update(per_process_objects(accelerator))
    return found


@dataclasses.dataclass(frozen=True)
class Staged:
    """A checkpoint read into memory and checked against the Accelerator, ready to apply."""

    models: list[int]
    """The indices of the prepared models this load restores (a load_state pre-hook may take some)."""
    weights: list[dict[str, torch.Tensor]]
    gradients: list[dict[str, torch.Tensor]]
    objects: dict[str, Any]
    manifest: Manifest

    @property
    def sharded(self) -> bool:
        """True when the models and optimizers are in the checkpoint's shards/ (read by `read_shards`)."""
        return is_sharded_checkpoint(self.manifest)


def stage(accelerator: CheckpointHost, folder: Path, manifest: Manifest, label: str, models: list[int]) -> Staged:
    """Read every file this process needs (for the prepared models `models`, by index) and check
    it fits; raise CheckpointError listing all differences, having changed nothing. The shards of
    a sharded checkpoint are checked here by their index, and read afterwards by `read_shards`."""
    problems = setup_problems(accelerator, manifest) + fsdp_problems(accelerator, manifest)
    _raise_if(label, problems or _missing_files(accelerator, manifest, models))
    sharded = is_sharded_checkpoint(manifest)
    if sharded:
        _raise_if(label, accelerator.strategy.shard_problems(accelerator, folder, manifest, models, label))
    else:
        _raise_if(label, _weight_problems(accelerator, folder, models, label))
    objects = {name: load_torch(folder / name, label) for name in _object_files(accelerator, manifest)}
    problems = []
    for index in range(0 if sharded else len(accelerator.prepared.optimizers)):
        problems += optimizer_problems(index, accelerator.prepared.optimizers[index], objects[layout.optimizer_file(index)])
    _raise_if(label, problems)
    weights = [{} if sharded else load_tensors(folder / layout.model_file(i), label) for i in models]
    inside_window = manifest.gradient_accumulation["micro_batch"] != 0
    gradients = [load_tensors(folder / layout.gradients_file(i), label) if inside_window else {} for i in models]
    return Staged(models=models, weights=weights, gradients=gradients, objects=objects, manifest=manifest)


def _weight_problems(accelerator: CheckpointHost, folder: Path, models: list[int], label: str) -> list[str]:
    problems = []
    for index in models:
        shapes = tensor_shapes(folder / layout.model_file(index), label)
        problems += [f"model {index}: {p}" for p in weight_problems(accelerator, accelerator.prepared.models[index], shapes)]
    return problems


def apply(accelerator: CheckpointHost, staged: Staged, label: str, shards: dict[str, Any] | None = None) -> None:
    """Restore a staged checkpoint into the Accelerator and its prepared objects (with a sharded
    checkpoint's models and optimizers as `read_shards` read them)."""
    objects = staged.objects
    rank = accelerator.process_state.process_index
    rng_file, loaders_file = own_files(rank, staged.manifest.num_processes, staged.manifest.process_states)
    for index, loader in enumerate(accelerator.prepared.dataloaders):
        if loader.config.use_stateful_dataloader:  # else left as prepared: a fresh epoch, as under Accelerate
            with restoring(label, f"dataloader {index}", loaders_file):
                loader.load_state_dict(objects[loaders_file][index])
    for index, obj in enumerate(accelerator.prepared.registered):
        with restoring(label, f"registered object {index} ({type(obj).__name__})", layout.custom_file(index)):
            obj.load_state_dict(objects[layout.custom_file(index)])
    if shards is not None:
        with restoring(label, "the models and optimizers", layout.SHARDS_DIR):
            accelerator.strategy.apply_shards(accelerator, shards, staged.models)
    else:
        _apply_files(accelerator, staged, label)
    for index, scheduler in enumerate(accelerator.prepared.schedulers):
        with restoring(label, f"scheduler {index}", layout.scheduler_file(index)):
            scheduler.load_state_dict(objects[layout.scheduler_file(index)])
    with restoring(label, f"the precision ({accelerator.precision.name})", layout.PRECISION_FILE):
        accelerator.precision.load_state_dict(objects[layout.PRECISION_FILE])
    accumulation = staged.manifest.gradient_accumulation
    accelerator.gradient_state.step = accumulation["micro_batch"]
    accelerator.gradient_state.sync_gradients = accumulation["sync_gradients"]
    if rng_file is None:
        warn_no_rng(rank, staged.manifest.num_processes, staged.manifest.process_states)
        return
    with restoring(label, "the RNG states", rng_file):
        restore_rng(objects[rng_file])


def _apply_files(accelerator: CheckpointHost, staged: Staged, label: str) -> None:
    """The models and optimizers from model*.safetensors and optimizer*.pt."""
    by_name = staged.manifest.fsdp is not None  # optimizer states saved under FSDP are keyed by parameter name
    for position, index in enumerate(staged.models):
        model = accelerator.prepared.models[index]
        with restoring(label, f"model {index}", layout.model_file(index)):
            load_weights(accelerator, model, staged.weights[position])
            load_gradients(accelerator, model, staged.gradients[position])
    for index in range(len(accelerator.prepared.optimizers)):
        with restoring(label, f"optimizer {index}", layout.optimizer_file(index)):
            load_optimizer(accelerator, index, staged.objects[layout.optimizer_file(index)], by_name)


def _object_files(accelerator: CheckpointHost, manifest: Manifest) -> list[str]:
    """The torch.save files this process reads: the shared ones and its own (see processes.own_files)."""
    rng_file, loaders_file = own_files(accelerator.process_state.process_index, manifest.num_processes, manifest.process_states)
    optimizers = 0 if is_sharded_checkpoint(manifest) else len(accelerator.prepared.optimizers)
    return [
        *(layout.optimizer_file(i) for i in range(optimizers)),
        *(layout.scheduler_file(i) for i in range(len(accelerator.prepared.schedulers))),
        *(layout.custom_file(i) for i in range(len(accelerator.prepared.registered))),
        layout.PRECISION_FILE,
        *([rng_file] if rng_file is not None else []),
        loaders_file,
    ]


def _missing_files(accelerator: CheckpointHost, manifest: Manifest, models: list[int]) -> list[str]:
    weights = [METADATA] if is_sharded_checkpoint(manifest) else [layout.model_file(i) for i in models]
    needed = [*weights, *_object_files(accelerator, manifest)]
    if manifest.gradient_accumulation["micro_batch"]:
        needed += [layout.gradients_file(i) for i in models]
    return [f"the manifest does not list {name}" for name in needed if name not in manifest.files]


def _raise_if(label: str, problems: list[str]) -> None:
    if problems:
        raise CheckpointError(f"{label} does not fit this training setup: " + "; ".join(problems) + ".")


@contextlib.contextmanager
def restoring(label: str, what: str, file: str) -> Iterator[None]:
    """Name the object and file when restoring one of them fails."""
    try:
        yield
    except Exception as exc:
        raise CheckpointError(
            f"{label}: restoring {what} from {file} failed: {exc}. Objects restored before it keep the "
            "checkpoint's state; build the same objects as the saved run, then load again."
        ) from exc
