"""Resuming a run from a checkpoint folder written by Hugging Face Accelerate's `save_state`.

`load_state` comes here for a folder without accel's manifest that holds Accelerate's files
(accelerate_files.py says which, and how each is read without running code). What is restored,
as Accelerate's own `load_state` restores it: the prepared models' weights (a `module.` or
`_orig_mod.` prefix from DDP or torch.compile is taken off), optimizers, schedulers, the fp16 loss
scaler, registered objects, this process's RNG states and the gradient-accumulation counter. The
prepared dataloaders keep their own position, as under Accelerate (whose scripts skip the batches
already done with `skip_first_batches`). Every file is read and checked before anything changes.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel.checkpointing import accelerate_files as files
from accel.checkpointing.across_processes import agree
from accel.checkpointing.compat import optimizer_problems
from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.hooks import models_loaded_by_accel
from accel.checkpointing.models import load_weights, shape_problems
from accel.checkpointing.rng import restore_rng
from accel.checkpointing.safetensors_io import without_shared
from accel.checkpointing.sharded_load import load_optimizer
from accel.checkpointing.training_state import restoring

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

_WRAPPER_PREFIXES = ("module.", "_orig_mod.")
"""What DDP and torch.compile put before a parameter's name in the state_dict Accelerate saves."""


@dataclasses.dataclass(frozen=True)
class Staged:
    """An Accelerate checkpoint read into memory and checked, ready to apply."""

    models: list[int]
    weights: list[tuple[str, dict[str, torch.Tensor]]]
    optimizers: list[Any]
    schedulers: list[Any]
    custom: list[Any]
    scaler: Any
    rng: tuple[dict[str, Any], int] | None


def load_accelerate_state(accelerator: CheckpointHost, folder: Path, label: str) -> None:
    """Restore the Accelerate checkpoint in `folder` (every process reads it); raise CheckpointError
    on every process, having changed nothing, if any process cannot read or fit its part."""
    models = models_loaded_by_accel(accelerator, folder)
    staged = agree(accelerator, lambda: _stage(accelerator, folder, label, models), "load_state")
    _apply(accelerator, staged, label)
    number = files.checkpoint_number(folder)
    if number is not None:  # continue Accelerate's checkpoint_<n> numbering
        config = accelerator.project_configuration
        config.iteration = max(config.iteration, number + 1)


def _stage(accelerator: CheckpointHost, folder: Path, label: str, models: list[int]) -> Staged:
    files.refuse_unsupported_layout(folder, label)
    prepared = accelerator.prepared
    weights = []
    problems: list[str] = []
    for index in models:
        name, saved = files.model_weights(folder, index, label)
        renamed = _unprefixed(saved, _expected_names(accelerator, index))
        problems += [f"model {index} ({name}): {p}" for p in _weight_problems(accelerator, index, renamed)]
        weights.append((name, renamed))
    optimizers = [files.read(folder, files.indexed(files.OPTIMIZER, i, ".bin"), label) for i in range(len(prepared.optimizers))]
    for index, state in enumerate(optimizers):
        problems += optimizer_problems(index, prepared.optimizers[index], state)
    schedulers = [files.read(folder, files.indexed(files.SCHEDULER, i, ".bin"), label) for i in range(len(prepared.schedulers))]
    custom = _custom_states(accelerator, folder, label)
    if problems:
        raise CheckpointError(f"{label} (Accelerate's format) does not fit this training setup: " + "; ".join(problems) + ".")
    scaler = _scaler_state(accelerator, folder, label)
    rng = files.rng_state(folder, accelerator.process_state.process_index, label)
    return Staged(models, weights, optimizers, schedulers, custom, scaler, rng)


def _expected_names(accelerator: CheckpointHost, index: int) -> dict[str, tuple[int, ...]]:
    model = accelerator.prepared.models[index]
    target = accelerator.unwrap_model(model, keep_torch_compile=False)
    shapes = accelerator.strategy.weight_shapes(target)
    if shapes is None:
        shapes = {name: tuple(t.shape) for name, t in without_shared(accelerator.get_state_dict(model)).items()}
    return shapes


def _unprefixed(saved: dict[str, torch.Tensor], expected: dict[str, Any]) -> dict[str, torch.Tensor]:
    """`saved` under the unwrapped model's names: wrapper prefixes taken off, tied copies dropped."""
    renamed: dict[str, torch.Tensor] = {}
    for name, tensor in without_shared(saved).items():
        plain = name
        while plain not in expected and plain.startswith(_WRAPPER_PREFIXES):
            plain = plain.split(".", 1)[1]
        renamed[plain] = tensor
    return renamed


def _weight_problems(accelerator: CheckpointHost, index: int, weights: dict[str, torch.Tensor]) -> list[str]:
    return shape_problems(_expected_names(accelerator, index), {name: tuple(t.shape) for name, t in weights.items()})


def _custom_states(accelerator: CheckpointHost, folder: Path, label: str) -> list[Any]:
    """The registered objects' states; the number of files must be the number of objects (as in Accelerate)."""
    found = sorted(int(m.group(1)) for entry in folder.iterdir() if (m := files.CUSTOM.fullmatch(entry.name)))
    registered = len(accelerator.prepared.registered)
    if found != list(range(registered)):
        raise CheckpointError(
            f"{label} holds {len(found)} custom_checkpoint_<i>.pkl file(s), and this Accelerator has {registered} "
            "object(s) registered with register_for_checkpointing. Register the same objects, in the same order, as "
            "the run that saved it."
        )
    return [files.read(folder, f"custom_checkpoint_{i}.pkl", label) for i in found]


def _scaler_state(accelerator: CheckpointHost, folder: Path, label: str) -> Any:
    """scaler.pt's state when this run scales the loss; a warning where one side has a scaler and the other not."""
    scaler = accelerator.precision.grad_scaler
    present = (folder / files.SCALER).is_file()
    if scaler is not None and present:
        return files.read(folder, files.SCALER, label)
    if scaler is not None:
        _warn(f"{label} has no {files.SCALER} (Accelerate scales the fp16 loss only on a GPU); the loss scaler "
              "starts from its initial scale.")
    elif present:
        _warn(f"{label} holds {files.SCALER}, a loss scaler's state, and this Accelerator "
              f"({accelerator.precision.name}) scales no loss; it is not used.")
    return None


def _apply(accelerator: CheckpointHost, staged: Staged, label: str) -> None:
    prepared = accelerator.prepared
    for index, obj in enumerate(prepared.registered):
        with restoring(label, f"registered object {index} ({type(obj).__name__})", f"custom_checkpoint_{index}.pkl"):
            obj.load_state_dict(staged.custom[index])
    for position, index in enumerate(staged.models):
        name, weights = staged.weights[position]
        with restoring(label, f"model {index}", name):
            load_weights(accelerator, prepared.models[index], weights)
    for index, state in enumerate(staged.optimizers):
        with restoring(label, f"optimizer {index}", files.indexed(files.OPTIMIZER, index, ".bin")):
            load_optimizer(accelerator, index, state, by_name=False)
    for index, scheduler in enumerate(prepared.schedulers):
        with restoring(label, f"scheduler {index}", files.indexed(files.SCHEDULER, index, ".bin")):
            scheduler.load_state_dict(staged.schedulers[index])
    if staged.scaler is not None and accelerator.precision.grad_scaler is not None:
        with restoring(label, "the loss scaler", files.SCALER):
            accelerator.precision.grad_scaler.load_state_dict(staged.scaler)
    _restore_rng_and_step(accelerator, staged, label)


def _restore_rng_and_step(accelerator: CheckpointHost, staged: Staged, label: str) -> None:
    rank = accelerator.process_state.process_index
    if staged.rng is None:
        _warn(f"{label} holds no random_states_{rank}.pkl: process {rank} keeps its own RNG states (its random "
              "numbers, dropout say, do not continue a saved sequence; Accelerate's load_state does the same).")
        return
    state, step = staged.rng
    gradient_state = accelerator.gradient_state
    gradient_state.step = step % gradient_state.num_steps  # Accelerate's counter, as a position in the window
    gradient_state.sync_gradients = gradient_state.step == 0
    with restoring(label, "the RNG states", f"random_states_{rank}.pkl"):
        restore_rng(state)


def _warn(message: str) -> None:
    warnings.warn(message, UserWarning, stacklevel=5)

