"""A PNG with one line chart per scalar logged to a JSON-lines file (matplotlib, no pyplot state)."""

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
