"""The jsonl tracker charts FP8 health metrics (fp8/<layer>/<reading>) apart: one chart per reading, a line per layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel.tracking import JSONLinesTracker
from accel.tracking.plot import split_health


def test_health_series_are_grouped_by_reading_with_a_line_per_layer() -> None:
    series = {
        "loss": [(1, 2.0)],
        "fp8/fc1/input_amax": [(1, 3.0)],
        "fp8/blocks.0.fc2/input_amax": [(1, 4.0)],
        "fp8/fc1/input_amax_ratio": [(2, 1.5)],
        "fp8/worst_saturated": [(1, 0.0)],
    }
    rest, health = split_health(series)
    assert rest == {"loss": [(1, 2.0)]}
    assert health == {
        "input_amax": {"fc1": [(1, 3.0)], "blocks.0.fc2": [(1, 4.0)]},
        "worst_saturated": {"worst_saturated": [(1, 0.0)]},
    }  # the ratios are left out of the PNG: the amax chart shows the movement


def test_finish_draws_health_into_its_own_png_and_the_rest_into_metrics_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the PNGs are drawn only when matplotlib is installed")
    from matplotlib.image import imread

    tracker = JSONLinesTracker("run", tmp_path)
    tracker.start()
    for step in (1, 2):
        tracker.log({"loss": 1.0 / step}, step=step)
        tracker.log({"fp8/fc1/input_amax": 2.0 * step, "fp8/fc2/input_amax": 3.0, "fp8/fc1/input_saturated": 0.0}, step=step)
    tracker.finish()
    assert imread(tracker.plot_file).shape[:2] == (320, 450)  # one chart: the loss
    assert imread(tracker.health_plot_file).shape[:2] == (360, 2 * 550)  # input_amax and input_saturated
