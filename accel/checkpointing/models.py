"""Model weights and gradients: what is saved (original names, high precision, tied weights once)
and whether a checkpoint's weights fit a model (names and shapes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from accel.checkpointing.safetensors_io import without_shared

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

_SHOWN = 8
"""How many names an error lists before saying how many more there are."""


def model_weights(accelerator: CheckpointHost, model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights to save: `get_state_dict` (original names, high precision), ties written once."""
    return without_shared(accelerator.get_state_dict(model))


def model_gradients(accelerator: CheckpointHost, model: nn.Module) -> dict[str, torch.Tensor]:
    """The gradients accumulated so far (saved when a checkpoint falls inside an accumulation window)."""
    target = accelerator.unwrap_model(model, keep_torch_compile=False)
    return {name: p.grad.detach() for name, p in target.named_parameters() if p.grad is not None}


def weight_problems(accelerator: CheckpointHost, model: nn.Module, saved: dict[str, tuple[int, ...]]) -> list[str]:
    """What differs between the saved weights' names/shapes and the model's; empty when they fit."""
    target = accelerator.unwrap_model(model, keep_torch_compile=False)
    expected = accelerator.strategy.weight_shapes(target)  # without gathering, where weights are sharded
    if expected is None:
        expected = {name: tuple(t.shape) for name, t in model_weights(accelerator, model).items()}
    return shape_problems(expected, saved)


def shape_problems(expected: dict[str, tuple[int, ...]], saved: dict[str, tuple[int, ...]]) -> list[str]:
    """The names missing on either side and the shapes that differ, in words; empty when they fit."""
    problems = []
    missing = [name for name in expected if name not in saved]
    unexpected = [name for name in saved if name not in expected]
    if missing:
        problems.append(f"parameters missing from the checkpoint: {_names(missing)}")
    if unexpected:
        problems.append(f"parameters in the checkpoint that this model does not have: {_names(unexpected)}")
    reshaped = [
        f"{name} (checkpoint {saved[name]}, model {shape})"
        for name, shape in expected.items()
        if name in saved and saved[name] != shape
    ]
    if reshaped:
        problems.append(f"shapes that differ: {_names(reshaped)}")
    return problems


def load_weights(accelerator: CheckpointHost, model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy saved weights into the prepared model (names were checked by `weight_problems`).

    Tied weights were saved once; loading one name fills every name that shares it. A sharded
    model gets the full weights on every process, and each keeps its shards of them.
    """
    target = accelerator.unwrap_model(model, keep_torch_compile=False)
    accelerator.strategy.load_full_weights(target, weights)


def load_gradients(accelerator: CheckpointHost, model: nn.Module, gradients: dict[str, torch.Tensor]) -> None:
    """Set each parameter's gradient to the saved one; parameters without a saved gradient get None."""
    target = accelerator.unwrap_model(model, keep_torch_compile=False)
    for name, parameter in target.named_parameters():
        saved = gradients.get(name)
        parameter.grad = None if saved is None else saved.to(device=parameter.device, dtype=parameter.dtype)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown if len(names) <= _SHOWN else f"{shown} and {len(names) - _SHOWN} more"
