"""Training memory per rank, before the job: parameters, gradients, optimizer state, communication buffers.

Computed from the parameters' shapes alone (a model on the meta device), for a precision, a layout
and a number of processes, by the rules each part of a run follows:

* precision: "no" keeps the model's dtype; fp16/bf16 (mixed) keep float32 weights (accel makes
  16-bit trainable weights float32 masters) and float32 gradients; bf16-true/16-true hold weights,
  gradients and optimizer state in 16 bits; 64-true in float64;
* optimizer: AdamW/Adam keep two tensors like each trainable parameter plus a 4-byte `step` per
  parameter (torch's default, on the host); SGD with momentum one tensor; plain SGD none;
* layout: "ddp" replicates everything and adds DDP's gradient buckets (one more copy of the
  gradients, unless `gradient_as_bucket_view`); "fsdp" (FSDP2) shards each parameter on dim 0 in
  chunks of ceil(rows / N): parameters and gradients are held padded to that chunk on every rank,
  optimizer state only for the rank's own rows.

Checked against what real runs hold (measure.py) in tests/estimate/.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

PRECISIONS = {  # precision -> weight dtype of trainable parameters (None: as the model has them)
    "no": None, "fp16": torch.float32, "bf16": torch.float32, "bf16-true": torch.bfloat16,
    "16-true": torch.float16, "64-true": torch.float64,
}
OPTIMIZERS = {"adamw": 2, "adam": 2, "sgd": 0, "sgd-momentum": 1}  # name -> state tensors like each parameter
LAYOUTS = ("ddp", "fsdp")
STEP_BYTES = 4  # Adam's per-parameter `step`, a float32 scalar


@dataclass(frozen=True)
class RankBytes:
    """What one rank holds for training, in bytes (activations excluded)."""

    rank: int
    parameters: int
    gradients: int
    optimizer: int
    buffers: int  # communication buffers kept between steps (DDP's gradient buckets)

    @property
    def total(self) -> int:
        """Everything above together."""
        return self.parameters + self.gradients + self.optimizer + self.buffers


@dataclass(frozen=True)
class _Tensor:
    rows: int
    rest: int
    itemsize: int
    trainable: bool


def _dtype(parameter: nn.Parameter, precision: str) -> torch.dtype:
    """The dtype `parameter` is held in under `precision` once prepared."""
    target = PRECISIONS[precision]
    if target is None or not parameter.is_floating_point():
        return parameter.dtype
    if precision.endswith("-true") or parameter.requires_grad:  # true precisions convert frozen weights too
        return target
    return parameter.dtype


def _tensors(model: nn.Module, precision: str) -> list[_Tensor]:
    found = []
    for parameter in model.parameters():  # tied parameters once
        rows = parameter.shape[0] if parameter.dim() else 1
        itemsize = torch.empty((), dtype=_dtype(parameter, precision)).element_size()
        found.append(_Tensor(rows, parameter.numel() // max(rows, 1), itemsize, parameter.requires_grad))
    return found


def _check(precision: str, layout: str, processes: int, optimizer: str) -> None:
    for name, value, accepted in (("precision", precision, PRECISIONS), ("layout", layout, LAYOUTS),
                                  ("optimizer", optimizer, OPTIMIZERS)):
        if value not in accepted:
            raise ValueError(f"{name}={value!r} is not estimated; accepted: {', '.join(accepted)}")
    if processes < 1:
        raise ValueError(f"processes={processes} must be at least 1")


def training_bytes(
    model: nn.Module, precision: str = "no", layout: str = "ddp", processes: int = 1, optimizer: str = "adamw",
    gradient_as_bucket_view: bool = False,
) -> list[RankBytes]:
    """Each rank's bytes for training `model` (built on the meta device or not: only shapes are read).

    Args:
        model: the model, as the script builds it (its parameters' dtypes are the "no" precision's).
        precision: an accel precision: "no", "fp16", "bf16", "bf16-true", "16-true" or "64-true".
        layout: "ddp" (one process or DDP) or "fsdp" (FSDP2, every parameter sharded).
        processes: the number of processes.
        optimizer: "adamw", "adam", "sgd" or "sgd-momentum".
        gradient_as_bucket_view: DDP's option: gradients are views of its buckets (no second copy).

    Returns:
        One RankBytes per rank, in rank order.

    Example:
        >>> with torch.device("meta"):
        ...     model = torch.nn.Linear(4096, 4096)
        >>> training_bytes(model, "bf16", "fsdp", processes=8)[0].total
    """
    _check(precision, layout, processes, optimizer)
    tensors = _tensors(model, precision)
    states = OPTIMIZERS[optimizer]
    ranks = []
    for rank in range(processes):
        parameters = gradients = state = 0
        for t in tensors:
            if layout == "fsdp" and processes > 1:
                chunk = math.ceil(t.rows / processes)
                held = chunk * t.rest * t.itemsize  # padded to the chunk on every rank
                own = max(0, min(chunk, t.rows - rank * chunk)) * t.rest * t.itemsize
            else:
                held = own = t.rows * t.rest * t.itemsize
            parameters += held
            if t.trainable:
                gradients += held
                state += states * own + (STEP_BYTES if optimizer.startswith("adam") else 0)
        buffers = gradients if layout == "ddp" and processes > 1 and not gradient_as_bucket_view else 0
        ranks.append(RankBytes(rank, parameters, gradients, state, buffers))
    return ranks


def per_parameter(ranks: Sequence[RankBytes], parameters: int) -> float:
    """The largest rank's bytes per model parameter (ZeRO's accounting: 16 for fp32 AdamW on one rank)."""
    return max(r.total for r in ranks) / max(parameters, 1)
