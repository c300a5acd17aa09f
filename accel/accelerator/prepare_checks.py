"""Checks `Accelerator.prepare` makes on optimizers: one wrapper per optimizer, and none that trains
nothing the Accelerator prepared."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from accel.backends.base import PrecisionBackend
from accel.training.optimizer import AcceleratedOptimizer

if TYPE_CHECKING:
    from accel.quantization import Quantizer


def existing_wrapper(
    optimizers: Sequence[AcceleratedOptimizer], optimizer: torch.optim.Optimizer
) -> AcceleratedOptimizer | None:
    """The wrapper already made for `optimizer` (the user's, or one a backend put in its place), if any.

    `prepare(model, opt, opt)`, or `opt` given again in a later call, must not make a second
    wrapper: two wrappers of one optimizer would step it twice per step and save it twice.
    """
    for wrapped in optimizers:
        if optimizer is wrapped or optimizer is wrapped.original or optimizer is wrapped.optimizer:
            return wrapped
    return None


def check_orphan_optimizers(
    models: Sequence[nn.Module],
    optimizers: list[AcceleratedOptimizer],
    backend: PrecisionBackend,
    reported: set[int],
) -> None:
    """Report each optimizer none of whose parameters belongs to a prepared model, once.

    A warning, or, where `backend.orphan_optimizer_is_error`, ValueError; the refused wrapper is
    first removed from `optimizers`, so the Accelerator keeps no optimizer it refused. Nothing is
    checked before a model is prepared (an optimizer may come before its model). `reported`
    holds the ids of the optimizers already reported.
    """
    if not models:
        return
    owned = {id(p) for model in models for p in model.parameters()}
    for optimizer in list(optimizers):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if id(optimizer) in reported or any(id(p) in owned for p in params):
            continue
        reported.add(id(optimizer))
        name = type(optimizer.optimizer).__name__
        what = f"prepare: none of the {len(params)} parameters of {name} belongs to a prepared model"
        fix = (
            "Build the optimizer from the parameters of the model you pass to prepare() (not of a copy), "
            "and prepare that model in the same call or an earlier one."
        )
        if backend.orphan_optimizer_is_error:
            optimizers.remove(optimizer)
            raise ValueError(
                f"{what}. With mixed_precision={backend.name!r} the optimizer updates the prepared model's "
                f"{backend.param_dtype} weights directly (there is no fp32 master copy), so this one would update "
                f"tensors the model never uses and training would change nothing. {fix}"
            )
        warnings.warn(f"{what}, so its steps will not train what you prepared. {fix}", UserWarning, stacklevel=3)


def check_quantized_optimizers(optimizers: list[AcceleratedOptimizer], quantizer: Quantizer | None) -> None:
    """Refuse an optimizer over weights that quantization replaced (it would never update them); the
    refused wrapper is first removed from `optimizers`, so a corrected prepare() can follow."""
    if quantizer is None:
        return
    for wrapped in list(optimizers):
        try:
            quantizer.check_optimizer(wrapped.optimizer)
        except ValueError:
            optimizers.remove(wrapped)
            raise
