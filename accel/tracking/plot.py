"""PNGs of what was logged to a JSON-lines file (matplotlib, no pyplot state): one line chart per
scalar, and the FP8 health metrics (`fp8/<layer>/<reading>`) as one chart per reading with a line
per layer."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from accel.tracking.values import is_scalar


def read_series(path: Path) -> dict[str, list[tuple[float, float]]]:
    """Every scalar in the JSON-lines records at `path` as (x, value) pairs, x being the record's step
    (or its line number when it was logged without one); nested dicts become `outer/inner`."""
    series: dict[str, list[tuple[float, float]]] = {}
    with open(path) as file:
        for number, line in enumerate(file):
            record = json.loads(line)
            x = record["step"] if record["step"] is not None else number
            for key, value in _flatten(record["values"]).items():
                if is_scalar(value) and not isinstance(value, bool):
                    series.setdefault(key, []).append((x, float(value)))
    return series


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def plot_scalars(series: dict[str, list[tuple[float, float]]], png: Path, title: str) -> None:
    """Write `png`: a grid of charts, one per series, value against step."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    columns = min(3, len(series))
    rows = math.ceil(len(series) / columns)
    figure = Figure(figsize=(4.5 * columns, 3.2 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    for index, (key, points) in enumerate(sorted(series.items())):
        axes = figure.add_subplot(rows, columns, index + 1)
        xs, ys = zip(*points)
        axes.plot(xs, ys, marker="." if len(points) < 50 else None)
        axes.set_title(key)
        axes.set_xlabel("step")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(True, alpha=0.3)
    figure.savefig(png, dpi=100)


HEALTH_PREFIX = "fp8/"
"""The prefix of the FP8 health metrics (accel.backends.fp8.health), charted apart from the rest."""
LOG_SCALE_READINGS = ("amax", "scale")
LEGEND_LINES = 10
UNCHARTED = ("_amax_ratio",)
"""Health metrics left out of the PNG: the amax chart (log axis) shows the same movement."""


def split_health(series: dict[str, list[tuple[float, float]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(everything else, FP8 health grouped as reading -> layer -> points).

    `fp8/fc1/input_amax` goes to reading `input_amax`, line `fc1`; a model-wide metric such as
    `fp8/worst_saturated` is its own reading with one line. The amax ratios are not charted (UNCHARTED).
    """
    rest: dict[str, Any] = {}
    groups: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for key, points in series.items():
        if not key.startswith(HEALTH_PREFIX):
            rest[key] = points
            continue
        layer, _, reading = key.removeprefix(HEALTH_PREFIX).rpartition("/")
        if reading.endswith(UNCHARTED):
            continue
        groups.setdefault(reading, {})[layer or reading] = points
    return rest, groups


def plot_health(groups: dict[str, dict[str, list[tuple[float, float]]]], png: Path, title: str) -> None:
    """Write `png`: one chart per FP8 health reading, one line per layer (amax and scale on a log axis)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    columns = min(3, len(groups))
    rows = math.ceil(len(groups) / columns)
    figure = Figure(figsize=(5.5 * columns, 3.6 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(f"{title}: FP8 health")
    for index, (reading, lines) in enumerate(sorted(groups.items())):
        axes = figure.add_subplot(rows, columns, index + 1)
        for layer, points in sorted(lines.items()):
            xs, ys = zip(*points)
            axes.plot(xs, ys, marker="." if len(points) < 50 else None, label=layer)
        if reading.endswith(LOG_SCALE_READINGS) and all(y > 0 for pts in lines.values() for _, y in pts):
            axes.set_yscale("log")
        axes.set_title(reading)
        axes.set_xlabel("optimizer step")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(True, alpha=0.3)
        if 1 < len(lines) <= LEGEND_LINES:
            axes.legend(fontsize="x-small")
    figure.savefig(png, dpi=100)
