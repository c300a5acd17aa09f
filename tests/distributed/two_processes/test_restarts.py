"""`accel launch --max_restarts N`: a rank that crashes once is restarted, and the script resumes from its newest
automatic checkpoint (`load_state()` without a folder) to the very weights of a run that never failed."""

from __future__ import annotations

import sys
from pathlib import Path

from launching import launch

LAUNCH = [sys.executable, "-m", "accel", "launch", "--num_processes", "2", "--cpu"]


def test_a_crashed_rank_is_restarted_and_the_run_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    restarted = launch("restart_script.py", str(tmp_path / "restarted"), str(marker), timeout=240,
                       launcher=[*LAUNCH, "--max_restarts", "1", "--monitor_interval", "0.2"])
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert marker.exists()  # rank 1 did crash
    assert "RuntimeError: rank 1 crashes once (test)" in restarted.stderr
    assert "accel launch: rank 1 failed; restarting every process of this machine (restart 1 of 1)" in restarted.stderr
    assert restarted.of("restarts") == [1, 1]
    assert restarted.of("started_at") == [6, 6]  # the newest complete checkpoint when rank 1 crashed after step 7

    plain = launch("restart_script.py", str(tmp_path / "plain"), timeout=240, launcher=LAUNCH)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.of("restarts") == [0, 0] and plain.of("started_at") == [0, 0]
    assert restarted.of("params") == plain.of("params")  # bit for bit: floats compared exactly
    assert plain.of("params")[0] == plain.of("params")[1]


def test_without_restarts_the_crash_ends_the_launch(tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    result = launch("restart_script.py", str(tmp_path / "project"), str(marker), timeout=240,
                    launcher=[*LAUNCH, "--max_restarts", "0"])
    assert result.returncode == 1
    assert marker.exists()
    assert "restarting" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "accel launch: restart_script.py exited with status 1 (rank 1 of 2)"
    assert "params" not in result.results.get(0, {})
