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

from accel.accelerator.checkpointing import layout
from accel.accelerator.checkpointing.compat import contents_of, optimizer_problems, setup_problems
from accel.accelerator.checkpointing.errors import CheckpointError
from accel.accelerator.checkpointing.manifest import Manifest
from accel.accelerator.checkpointing.models import (
    load_gradients,
    load_weights,
    model_gradients,
    model_weights,
    weight_problems,
)
from accel.accelerator.checkpointing.processes import averaged, own_files, per_process_objects, warn_no_rng
from accel.accelerator.checkpointing.rng import restore_rng
from accel.accelerator.checkpointing.serialization import check_safe, load_tensors, load_torch, tensor_shapes

if TYPE_CHECKING:
    from accel.accelerator.accelerator import Accelerator


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


def collect(accelerator: Accelerator) -> Snapshot:
    """Gather the state to save; raises TypeError naming any part that cannot be stored safely.

    With several processes every process takes part (gradients and per-process state are
    exchanged), and every process ends with the whole snapshot.
    """
    gradient_state = accelerator.gradient_state
    inside_window = gradient_state.step != 0
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for index, model in enumerate(accelerator._models):
        tensors[layout.model_file(index)] = model_weights(accelerator, model)
        if inside_window:
            tensors[layout.gradients_file(index)] = averaged(model_gradients(accelerator, model), accelerator)
    described = _described_objects(accelerator)
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


def _described_objects(accelerator: Accelerator) -> dict[str, tuple[Any, str]]:
    """File name -> (value, what it is, for errors) of everything saved with torch.save."""
    found: dict[str, tuple[Any, str]] = {}
    for index, optimizer in enumerate(accelerator._optimizers):
        found[layout.optimizer_file(index)] = (optimizer.state_dict(), f"optimizer {index}'s state_dict()")
    for index, scheduler in enumerate(accelerator._schedulers):
        found[layout.scheduler_file(index)] = (scheduler.state_dict(), f"scheduler {index}'s state_dict()")
    for index, obj in enumerate(accelerator._checkpointed_objects):
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


def stage(accelerator: Accelerator, folder: Path, manifest: Manifest, label: str, models: list[int]) -> Staged:
    """Read every file this process needs (for the prepared models `models`, by index) and check
    it fits; raise CheckpointError listing all differences, having changed nothing."""
    _raise_if(label, setup_problems(accelerator, manifest) or _missing_files(accelerator, manifest, models))
    problems = []
    for index in models:
        model = accelerator._models[index]
        shapes = tensor_shapes(folder / layout.model_file(index), label)
        problems += [f"model {index}: {problem}" for problem in weight_problems(accelerator, model, shapes)]
    _raise_if(label, problems)
    objects = {name: load_torch(folder / name, label) for name in _object_files(accelerator, manifest)}
    problems = []
    for index, optimizer in enumerate(accelerator._optimizers):
        problems += optimizer_problems(index, optimizer, objects[layout.optimizer_file(index)])
    _raise_if(label, problems)
    weights = [load_tensors(folder / layout.model_file(i), label) for i in models]
    inside_window = manifest.gradient_accumulation["micro_batch"] != 0
    gradients = [load_tensors(folder / layout.gradients_file(i), label) if inside_window else {} for i in models]
    return Staged(models=models, weights=weights, gradients=gradients, objects=objects, manifest=manifest)


def apply(accelerator: Accelerator, staged: Staged, label: str) -> None:
    """Restore a staged checkpoint into the Accelerator and its prepared objects."""
    objects = staged.objects
    rank = accelerator.process_index
    rng_file, loaders_file = own_files(rank, staged.manifest.num_processes)
    for index, loader in enumerate(accelerator._dataloaders):
        with _restoring(label, f"dataloader {index}", loaders_file):
            loader.load_state_dict(objects[loaders_file][index])
    for index, obj in enumerate(accelerator._checkpointed_objects):
        with _restoring(label, f"registered object {index} ({type(obj).__name__})", layout.custom_file(index)):
            obj.load_state_dict(objects[layout.custom_file(index)])
    for position, index in enumerate(staged.models):
        model = accelerator._models[index]
        with _restoring(label, f"model {index}", layout.model_file(index)):
            load_weights(accelerator, model, staged.weights[position])
            load_gradients(accelerator, model, staged.gradients[position])
    for index, optimizer in enumerate(accelerator._optimizers):
        with _restoring(label, f"optimizer {index}", layout.optimizer_file(index)):
            optimizer.load_state_dict(objects[layout.optimizer_file(index)])
    for index, scheduler in enumerate(accelerator._schedulers):
        with _restoring(label, f"scheduler {index}", layout.scheduler_file(index)):
            scheduler.load_state_dict(objects[layout.scheduler_file(index)])
    with _restoring(label, f"the precision ({accelerator.precision.name})", layout.PRECISION_FILE):
        accelerator.precision.load_state_dict(objects[layout.PRECISION_FILE])
    accumulation = staged.manifest.gradient_accumulation
    accelerator.gradient_state.step = accumulation["micro_batch"]
    accelerator.gradient_state.sync_gradients = accumulation["sync_gradients"]
    if rng_file is None:
        warn_no_rng(rank, staged.manifest.num_processes)
        return
    with _restoring(label, "the RNG states", rng_file):
        restore_rng(objects[rng_file])


def _object_files(accelerator: Accelerator, manifest: Manifest) -> list[str]:
    """The torch.save files this process reads: the shared ones and its own (see processes.own_files)."""
    rng_file, loaders_file = own_files(accelerator.process_index, manifest.num_processes)
    return [
        *(layout.optimizer_file(i) for i in range(len(accelerator._optimizers))),
        *(layout.scheduler_file(i) for i in range(len(accelerator._schedulers))),
        *(layout.custom_file(i) for i in range(len(accelerator._checkpointed_objects))),
        layout.PRECISION_FILE,
        *([rng_file] if rng_file is not None else []),
        loaders_file,
    ]


def _missing_files(accelerator: Accelerator, manifest: Manifest, models: list[int]) -> list[str]:
    needed = [*(layout.model_file(i) for i in models), *_object_files(accelerator, manifest)]
    if manifest.gradient_accumulation["micro_batch"]:
        needed += [layout.gradients_file(i) for i in models]
    return [f"the manifest does not list {name}" for name in needed if name not in manifest.files]


def _raise_if(label: str, problems: list[str]) -> None:
    if problems:
        raise CheckpointError(f"{label} does not fit this training setup: " + "; ".join(problems) + ".")


@contextlib.contextmanager
def _restoring(label: str, what: str, file: str) -> Iterator[None]:
    """Name the object and file when restoring one of them fails."""
    try:
        yield
    except Exception as exc:
        raise CheckpointError(
            f"{label}: restoring {what} from {file} failed: {exc}. Objects restored before it keep the "
            "checkpoint's state; build the same objects as the saved run, then load again."
        ) from exc
