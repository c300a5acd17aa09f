"""Weights & Biases, offline: config, history and summary read back from the run's own file."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("wandb", reason='W&B is an optional extra: pip install "accel[wandb]"')

from wandb_files import read_run  # noqa: E402

from accel.tracking import WandBTracker  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_an_offline_run_records_config_history_and_summary_under_the_logging_dir(tmp_path: Path) -> None:
    tracker = WandBTracker("proj", logging_dir=tmp_path / "logs", name="first", tags=["t"])
    assert tracker.init_kwargs == {"name": "first", "tags": ["t"], "dir": str(tmp_path / "logs")}
    tracker.start()
    tracker.store_init_configuration({"lr": 0.01, "layers": 2})
    tracker.log({"loss": 1.0}, step=0)
    tracker.log({"loss": 0.5, "acc": 0.75}, step=1)
    assert tracker.tracker.name == "first" and tracker.tracker.project == "proj"
    tracker.finish()

    (log,) = (tmp_path / "logs" / "wandb").glob("offline-run-*/run-*.wandb")
    run = read_run(log)
    assert run["config"] == {"lr": 0.01, "layers": 2}
    history = [{k: v for k, v in row.items() if not k.startswith("_")} | {"_step": row["_step"]}
               for row in run["history"]]
    assert history == [{"loss": 1.0, "_step": 0}, {"loss": 0.5, "acc": 0.75, "_step": 1}]
    assert run["summary"]["loss"] == 0.5 and run["summary"]["acc"] == 0.75


def test_an_explicit_dir_wins_over_the_logging_dir(tmp_path: Path) -> None:
    tracker = WandBTracker("proj", logging_dir=tmp_path / "logs", dir=str(tmp_path / "mine"))
    assert tracker.init_kwargs == {"dir": str(tmp_path / "mine")}
