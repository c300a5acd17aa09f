"""The built-in jsonl tracker: JSON lines, config.json and the PNG, read back from disk."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from accel.tracking import JSONLinesTracker
from accel.tracking import jsonl_tracker


def run(tmp_path: Path, **kwargs: object) -> JSONLinesTracker:
    tracker = JSONLinesTracker("run", tmp_path, **kwargs)  # type: ignore[arg-type]
    tracker.start()
    tracker.store_init_configuration({"lr": 0.1, "layers": [2, 3], "device": torch.tensor(1)})
    tracker.log({"loss": 1.5, "acc": torch.tensor(0.25), "note": "warmup"}, step=0)
    tracker.log({"loss": 0.5, "group": {"a": 1, "b": 2.0}}, step=4)
    tracker.log({"loss": 0.25})
    return tracker


def test_each_log_call_is_one_json_line_with_step_time_and_values(tmp_path: Path) -> None:
    tracker = run(tmp_path)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [0, 4, None]
    assert records[0]["values"] == {"loss": 1.5, "acc": 0.25, "note": "warmup"}
    assert records[1]["values"] == {"loss": 0.5, "group": {"a": 1, "b": 2.0}}
    assert records[0]["time"] <= records[1]["time"] <= records[2]["time"]
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"lr": 0.1, "layers": [2, 3], "device": 1}
    tracker.finish()
    assert tracker.tracker is None


def test_finish_draws_every_scalar_into_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the PNG is drawn only when matplotlib is installed")
    from matplotlib.image import imread

    tracker = run(tmp_path)
    assert not tracker.plot_file.exists()
    tracker.finish()
    image = imread(tracker.plot_file)
    assert tracker.plot_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # four charts (loss, acc, group/a, group/b) in a 3-wide grid: 2 rows of 3
    height, width = image.shape[:2]
    assert width == 3 * 450 and height == 2 * 320
    assert image[..., :3].std() > 0.05  # something was drawn


def test_series_in_the_plot_are_the_logged_scalars(tmp_path: Path) -> None:
    from accel.tracking.plot import read_series

    run(tmp_path).finish()
    series = read_series(tmp_path / "run" / "metrics.jsonl")
    assert series == {"loss": [(0, 1.5), (4, 0.5), (2, 0.25)], "acc": [(0, 0.25)], "group/a": [(4, 1.0)],
                      "group/b": [(4, 2.0)]}


def test_plot_false_writes_no_png_and_missing_matplotlib_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tracker = run(tmp_path / "off", plot=False)
    tracker.finish()
    assert not tracker.plot_file.exists()
    monkeypatch.setattr(jsonl_tracker, "installed", lambda module: module != "matplotlib")
    tracker = run(tmp_path / "missing")
    with pytest.warns(UserWarning, match="pip install matplotlib"):
        tracker.finish()
    assert not tracker.plot_file.exists()
    with pytest.raises(ImportError, match="pip install matplotlib"):
        JSONLinesTracker("run", tmp_path, plot=True)


def test_a_resumed_run_appends(tmp_path: Path) -> None:
    run(tmp_path, plot=False).finish()
    run(tmp_path, plot=False).finish()
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 6


def test_a_value_that_is_not_a_number_or_text_raises_naming_the_key(tmp_path: Path) -> None:
    tracker = JSONLinesTracker("run", tmp_path, plot=False)
    tracker.start()
    with pytest.raises(TypeError, match="weights"):
        tracker.log({"weights": torch.ones(3)})
    with pytest.raises(TypeError, match="takes no options"):
        tracker.log({"loss": 1.0}, commit=True)
    tracker.finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracker.finish()  # a second finish does nothing
    with pytest.raises(RuntimeError, match="init_trackers"):
        tracker.log({"loss": 1.0})
