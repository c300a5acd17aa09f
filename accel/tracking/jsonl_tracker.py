"""accel's own tracker, with no dependency: JSON lines, and a PNG of every scalar at the end."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import IO, Any

from accel.tracking.base import GeneralTracker, on_main_process
from accel.tracking.plot import plot_health, plot_scalars, read_series, split_health
from accel.tracking.requirements import installed
from accel.tracking.values import plain


class JSONLinesTracker(GeneralTracker):
    """Writes to `logging_dir/run_name/`:

    - `metrics.jsonl`: one line per `log()` call, `{"step": ..., "time": ..., "values": {...}}`
      (time in seconds since the epoch; tensors become numbers). Appended to, so a resumed run continues it.
    - `config.json`: the `config` given to `init_trackers`.
    - `metrics.png` at `finish()`: one chart per logged scalar, when matplotlib is installed; the FP8
      health metrics (`fp8/...`, FP8RecipeKwargs(health_interval=N)) go to `fp8_health.png` instead, one
      chart per reading with a line per layer.

    Args:
        run_name: the run's folder name (the `project_name` of `init_trackers`).
        logging_dir: the folder holding every run.
        plot: True: always write the PNG (raises here when matplotlib is missing); False: never;
            None (default): when matplotlib is installed, else warn at `finish()` that there is none.
    """

    name = "jsonl"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], *, plot: bool | None = None) -> None:
        super().__init__()
        if plot not in (True, False, None):
            raise TypeError(f"JSONLinesTracker(plot={plot!r}) is not accepted: give True, False or None.")
        if plot is True and not installed("matplotlib"):
            raise ImportError(
                "JSONLinesTracker(plot=True) draws with matplotlib, which is not installed: "
                "pip install matplotlib (or pass plot=None to plot only when it is)."
            )
        self.run_name = run_name
        self.folder = Path(logging_dir) / run_name
        self.plot = plot
        self.file: IO[str] | None = None

    @property
    def metrics_file(self) -> Path:
        """The JSON-lines file."""
        return self.folder / "metrics.jsonl"

    @property
    def plot_file(self) -> Path:
        """The PNG written at `finish()`."""
        return self.folder / "metrics.png"

    @property
    def health_plot_file(self) -> Path:
        """The PNG of the FP8 health metrics, written at `finish()` when any were logged."""
        return self.folder / "fp8_health.png"

    @property
    def tracker(self) -> IO[str] | None:
        """The open JSON-lines file (None before `start()` and after `finish()`)."""
        return self.file

    @on_main_process
    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.file = open(self.metrics_file, "a", encoding="utf-8")

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """The hyperparameters as `config.json` (tensors become numbers; other objects as their str)."""
        text = json.dumps(values, indent=2, sort_keys=True, default=_fallback)
        (self.folder / "config.json").write_text(text + "\n", encoding="utf-8")

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Append one record. Numbers, one-element tensors, strings, None, and lists/dicts of them."""
        if kwargs:
            raise TypeError(f"the jsonl tracker's log() takes no options; got {sorted(kwargs)} (log_kwargs['jsonl']).")
        if self.file is None:
            raise RuntimeError("the jsonl tracker is not running: call accelerator.init_trackers(...) first.")
        record = {"step": step, "time": time.time(), "values": {str(k): plain(str(k), v) for k, v in values.items()}}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    @on_main_process
    def finish(self) -> None:
        """Close the file and draw `metrics.png` (see `plot`)."""
        if self.file is None:
            return
        self.file.close()
        self.file = None
        if self.plot is False:
            return
        if not installed("matplotlib"):
            message = f"no {self.plot_file.name} for {self.folder}: pip install matplotlib to get one."
            warnings.warn(message, stacklevel=3)
            return
        series, health = split_health(read_series(self.metrics_file))
        if series:
            plot_scalars(series, self.plot_file, title=self.run_name)
        if health:
            plot_health(health, self.health_plot_file, title=self.run_name)


def _fallback(value: Any) -> Any:
    """JSON for config values json cannot write: one-element tensors as numbers, anything else as str."""
    try:
        return plain("config", value)
    except TypeError:
        return str(value)
