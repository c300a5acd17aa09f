"""Loss spikes and throughput on 2 real processes (accel launch --num_processes 2 --cpu)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from launching import launch

SPIKE_STEP = 40


@pytest.mark.parametrize("action", ["checkpoint", "stop"])
def test_a_spike_on_one_rank_is_acted_on_by_both_at_the_same_step(action: str, tmp_path: Path) -> None:
    run = launch("monitoring_script.py", action, str(tmp_path), timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.of("spikes") == [[SPIKE_STEP], [SPIKE_STEP]]
    if action == "stop":
        assert run.of("stopped_at") == [SPIKE_STEP, SPIKE_STEP]
        assert not (tmp_path / "spikes").exists()
    else:
        assert run.of("stopped_at") == [None, None]
        assert [p.name for p in (tmp_path / "spikes").iterdir()] == [f"spike_step_{SPIKE_STEP}"]
        assert "loss spike at optimizer step 40" in run.stderr


def test_throughput_counts_every_data_parallel_process(tmp_path: Path) -> None:
    run = launch("monitoring_script.py", "log", str(tmp_path), timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    for numbers in run.of("throughput"):
        assert numbers["throughput/samples_per_s"] == pytest.approx(2 * numbers["throughput/samples_per_s_per_device"])
        assert numbers["throughput/mfu"] > 0
    assert run.of("flops_per_sample")[0] == run.of("flops_per_sample")[1] > 0


def test_the_launcher_settings_turn_both_monitors_on(tmp_path: Path) -> None:
    launcher = [sys.executable, "-m", "accel", "launch", "--num_processes", "2", "--cpu", "--spike_detection", "stop",
                "--log_throughput"]
    run = launch("monitoring_script.py", "settings", str(tmp_path), timeout=300, launcher=launcher)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.of("stopped_at") == [SPIKE_STEP, SPIKE_STEP]
    # ThroughputKwargs' defaults: a window of 10 steps, the first one untimed: windows end at steps 11, 21, 31
    assert all(numbers["throughput/samples_per_s"] > 0 for numbers in run.of("throughput"))
