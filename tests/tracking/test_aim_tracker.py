"""Aim: the run, read back from the Aim repository under the logging folder."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("aim", reason='Aim is an optional extra: pip install "accel[aim]"')

from aim import Repo, Run  # noqa: E402
from aim.sdk.index_manager import RepoIndexManager  # noqa: E402

from accel.tracking import AimTracker  # noqa: E402


def test_hparams_and_metrics_land_in_the_aim_repository(tmp_path: Path) -> None:
    tracker = AimTracker("first", tmp_path, experiment="proj", system_tracking_interval=None)
    tracker.start()
    tracker.store_init_configuration({"lr": 0.01, "layers": 2})
    tracker.log({"loss": 1.0}, step=0)
    tracker.log({"loss": 0.5, "acc": 0.75}, step=1)
    run_hash = tracker.tracker.hash
    tracker.finish()

    repo = Repo.from_path(str(tmp_path))
    assert repo.list_all_runs() == [run_hash]
    RepoIndexManager.get_index_manager(repo).index(run_hash)  # what `aim up` does in the background
    run = Run(run_hash=run_hash, repo=repo, read_only=True)
    assert (run.name, run.experiment, run["hparams"]) == ("first", "proj", {"lr": 0.01, "layers": 2})
    metrics = {m.name: [(step, value) for step, (value, *_) in m.data.items()] for m in run.metrics()}
    assert metrics == {"loss": [(0, 1.0), (1, 0.5)], "acc": [(1, 0.75)]}
