"""What the native FP8 backend reads out of its scalers and O1/O2 gradients: FP8 health's readings
and `fp8_stats`, one device sync for the whole model."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from accel.backends.fp8.health import Readings
from accel.backends.native_fp8 import ScalerGroup
from accel.backends.native_fp8.compact import CompactParameter


def health_readings(scalers: ScalerGroup, compact: Mapping[str, CompactParameter]) -> Readings:
    """Per FP8 tensor of `scalers`: amax and scale of the last step, and where the scaler counted them the
    saturated share of the values cast and the flushed share of the nonzero ones; per O1/O2 gradient of
    `compact` ('<layer>.weight_grad'): amax and scale. One device sync for all of them."""
    names, columns = [], []
    for name, scaler in scalers.scalers.items():
        counted = scaler.has_counts
        names.append((name, counted))
        columns += [scaler.last_amax, scaler.scale]
        if counted:
            columns += [scaler.last_saturated / max(scaler.last_values, 1),
                        scaler.last_flushed / scaler.last_nonzero.clamp(min=1)]
    for name, part in compact.items():
        names.append((f"{name}_grad", False))
        columns += [part.grad.last_amax, part.grad.last_scale_inv.reciprocal()]
    if not columns:
        return {}
    flat = iter(torch.stack([c.float().to(columns[0].device).reshape(()) for c in columns]).tolist())
    readings: Readings = {}
    for name, counted in names:
        keys = ("amax", "scale", "saturated", "underflowed") if counted else ("amax", "scale")
        readings[name] = {key: next(flat) for key in keys}
    return readings


def fp8_stats(scalers: ScalerGroup, compact: Mapping[str, CompactParameter]) -> dict[str, dict[str, float]]:
    """Per tensor of every FP8 layer, its last step's amax and scale (and its counts where it counted them);
    per O1/O2 gradient ('<layer>.weight_grad'), amax and scale."""
    stats = {name: {k: float(v) for k, v in s.items()} for name, s in scalers.stats().items()}
    for name, part in compact.items():
        stats[f"{name}_grad"] = {
            "amax": float(part.grad.last_amax),
            "scale": float(part.grad.last_scale_inv.reciprocal()),
        }
    return stats
