"""FP8 health: per-layer amax, scale, saturated and underflowed fractions, every N optimizer steps.

`FP8RecipeKwargs(health_interval=N)` makes the FP8 backend report, after every N-th optimizer step,
what each FP8 tensor of each layer looked like in that step, as metrics named
``fp8/<layer>/<role>_<reading>`` (say ``fp8/blocks.0.mlp.fc1/input_saturated``):

- ``amax``: the largest magnitude the tensor held (what its scale derives from);
- ``scale``: the scale of the tensor's casts (``fp8_max / amax / 2**margin``);
- ``saturated``: the share of the tensor's values that hit the FP8 maximum after scaling;
- ``underflowed``: the share of its nonzero values that became zero in FP8;
- ``amax_ratio``: amax over the amax of the previous report (how it moves; from the second report).

Besides, ``fp8/worst_saturated`` and ``fp8/worst_underflowed`` (the largest fractions of any
tensor) and ``fp8/saturating_tensors`` (how many saturate), and one summary line, are reported.
Each backend reads what it exposes (FP8Backend.health); the readings, names, movement and summary
are made here, once for every backend. Off (the default), nothing is installed: the backend's
optimizer step is its own, and no tensor is read or kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from accel.backends.native_fp8.formats import fp8_max

HealthSink = Callable[[dict[str, float], int, str], None]
"""Where reports go: (metric values, optimizer step, summary line). The Accelerator logs them."""
Readings = dict[str, dict[str, float]]
"""Per FP8 tensor, named '<layer>.<role>' (say 'fc1.input'): reading ('amax', 'scale', ...) -> value."""
Step = Callable[..., bool]

PREFIX = "fp8"
"""The first part of every health metric's name."""


def metric_name(tensor: str, reading: str) -> str:
    """The tracker key of one reading of one tensor.

    >>> metric_name("blocks.0.fc1.input", "amax")
    'fp8/blocks.0.fc1/input_amax'
    """
    layer, _, role = tensor.rpartition(".")
    return f"{PREFIX}/{layer}/{role}_{reading}" if layer else f"{PREFIX}/{role}_{reading}"


def cast_fractions(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(saturated, underflowed) fractions of casting `x * scale` to `dtype`, as 0-dim tensors (no sync).

    For backends that keep no counts of their own (the weights of ao and msamp): the cast is made
    here, at a report step only. saturated: values whose scaled magnitude exceeds the FP8 maximum;
    underflowed: nonzero values that the cast makes zero, over the nonzero values.
    """
    limit = fp8_max(dtype)
    scaled = x.detach().float() * scale
    cast = scaled.clamp(-limit, limit).to(dtype).float()
    nonzero = torch.count_nonzero(x)
    saturated = (scaled.abs() > limit).sum() / max(x.numel(), 1)
    underflowed = ((x != 0) & (cast == 0)).sum() / nonzero.clamp(min=1)
    return saturated, underflowed


class HealthMonitor:
    """Counts optimizer steps and, every `interval`-th, reads the backend's health and sends it to `sink`.

    `read` gives the readings of the step that just ended; `count(on)` asks the backend to count
    saturated and underflowed values during the coming step or not (those counts cost passes over
    every tensor, so only report steps count). `gaps` says what the backend cannot report; it joins
    the first summary line.
    """

    def __init__(
        self, interval: int, sink: HealthSink, read: Callable[[], Readings], count: Callable[[bool], None],
        library: str, gaps: str,
    ) -> None:
        self.interval = interval
        self.sink = sink
        self.read = read
        self.count = count
        self.library = library
        self.gaps = gaps
        self.step = 0
        self.previous_amax: dict[str, float] = {}
        count(self.counts_step(1))

    def counts_step(self, step: int) -> bool:
        """True when optimizer step `step` (from 1) is reported, so its casts must be counted."""
        return step % self.interval == 0

    def wrap(self, optimizer_step: Step) -> Step:
        """`optimizer_step` followed by the monitor's bookkeeping (installed only when health is on)."""

        def step_and_report(optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
            stepped = optimizer_step(optimizer, closure)
            self.after_step()
            return stepped

        return step_and_report

    def after_step(self) -> None:
        """End one optimizer step: report it if due, and switch counting for the next one."""
        self.step += 1
        reported = self.counts_step(self.step)
        if reported:
            self.report()
        counts_next = self.counts_step(self.step + 1)
        if counts_next != reported:
            self.count(counts_next)

    def report(self) -> None:
        """Read the backend (the one device sync of a report step) and send values and summary."""
        readings = self.read()
        values: dict[str, float] = {}
        ratios: dict[str, float] = {}
        for tensor, reading in readings.items():
            values.update({metric_name(tensor, key): value for key, value in reading.items()})
            amax, before = reading.get("amax"), self.previous_amax.get(tensor)
            if amax is not None and before is not None and before > 0 and math.isfinite(amax):
                ratios[tensor] = values[metric_name(tensor, "amax_ratio")] = amax / before
        self.previous_amax = {t: r["amax"] for t, r in readings.items() if "amax" in r and math.isfinite(r["amax"])}
        values.update(summary_values(readings))
        line = summary_line(readings, ratios, self.step, self.library)
        if self.gaps:
            line, self.gaps = f"{line} Not reported: {self.gaps}", ""
        self.sink(values, self.step, line)


def _worst(readings: Readings, key: str) -> tuple[str, float]:
    """The tensor with the largest `key` reading and that reading ('', 0.0 when none has it)."""
    ranked = [(r[key], t) for t, r in readings.items() if key in r and math.isfinite(r[key])]
    if not ranked:
        return "", 0.0
    value, tensor = max(ranked)
    return tensor, value


def summary_values(readings: Readings) -> dict[str, float]:
    """The model-wide metrics: worst fractions and the number of saturating tensors (where counted)."""
    values: dict[str, float] = {}
    for key in ("saturated", "underflowed"):
        if any(key in r for r in readings.values()):
            values[f"{PREFIX}/worst_{key}"] = _worst(readings, key)[1]
    if any("saturated" in r for r in readings.values()):
        values[f"{PREFIX}/saturating_tensors"] = float(sum(r.get("saturated", 0.0) > 0 for r in readings.values()))
    return values


def summary_line(readings: Readings, ratios: dict[str, float], step: int, library: str) -> str:
    """One line a person reads first: the worst saturation and underflow, and the largest amax move
    (`ratios`: per tensor, amax over the previous report's).

    >>> summary_line({"fc1.input": {"amax": 3.0, "saturated": 0.25}}, {"fc1.input": 4.0}, 10, "native")
    'FP8 health at step 10 (native, 1 tensors): worst saturation fc1.input 25.000% (1 tensors saturate); \
largest amax move fc1.input x4 since the last report.'
    """
    parts = [f"FP8 health at step {step} ({library}, {len(readings)} tensors):"]
    tensor, worst = _worst(readings, "saturated")
    if tensor:
        saturating = sum(r.get("saturated", 0.0) > 0 for r in readings.values())
        text = f"worst saturation {tensor} {worst:.3%} ({saturating} tensors saturate)" if worst else "no saturation"
        parts.append(f"{text};")
    tensor, worst = _worst(readings, "underflowed")
    if tensor:
        parts.append(f"worst underflow {tensor} {worst:.3%};" if worst else "no underflow;")
    moves = {t: r for t, r in ratios.items() if r > 0}
    if moves:
        tensor, ratio = max(moves.items(), key=lambda item: abs(math.log(item[1])))
        parts.append(f"largest amax move {tensor} x{ratio:.3g} since the last report;")
    if len(parts) == 1:
        parts.append("no readings;")
    return " ".join(parts)[:-1] + "."
