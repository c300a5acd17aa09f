"""The bench's MFU: the workload's FLOPs per token, counted once, over the device's peak (accel.monitoring.peaks)."""

from __future__ import annotations

import copy

import torch
from torch.utils.flop_counter import FlopCounterMode

from accel.bench.workload import Workload
from accel.monitoring.peaks import utilization


def flops_per_token(work: Workload) -> float | None:
    """FLOPs of one fp32 training step (forward and backward) of a copy of the model, per token of the step
    (`work.tokens_per_step`); None where torch counts none.

    Counted once, on the CPU, outside the timed cases: the same model in every case does the same arithmetic.
    """
    model = copy.deepcopy(work.model)
    inputs, targets = work.batches[0]
    with FlopCounterMode(display=False) as counter:
        work.loss_fn(model(inputs), targets).backward()
    total = counter.get_total_flops()
    return total / work.tokens_per_step if total > 0 and work.tokens_per_step > 0 else None


def mfu(flops: float | None, tokens_per_s: float | None, device: torch.device, compute_dtype: torch.dtype) -> float | None:
    """Model FLOPs utilization of a row: its FLOPs per second over the device's peak for `compute_dtype`, at most 1
    (None where there is no peak or the rate exceeds it: accel.monitoring.peaks.utilization)."""
    if flops is None or tokens_per_s is None:
        return None
    return utilization(flops * tokens_per_s, device, compute_dtype, None)
