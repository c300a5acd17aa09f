"""MLflow: the run, read back from the store under the logging folder with MlflowClient."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("mlflow", reason='MLflow is an optional extra: pip install "accel[mlflow]"')
pytest.importorskip("sqlalchemy", reason='the local MLflow store needs SQLAlchemy: pip install "accel[mlflow]"')

from mlflow.tracking import MlflowClient  # noqa: E402

from accel.tracking import MLflowTracker  # noqa: E402


@pytest.fixture(autouse=True)
def no_mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_TAGS", "MLFLOW_NESTED_RUN"):
        monkeypatch.delenv(name, raising=False)


def test_params_and_metrics_land_in_the_store_under_the_logging_dir(tmp_path: Path) -> None:
    tracker = MLflowTracker("proj", logging_dir=tmp_path, run_name="first", tags={"team": "a"})
    assert tracker.tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    tracker.start()
    with pytest.warns(UserWarning, match="too_long"):
        tracker.store_init_configuration({"lr": 0.01, "batch_size": 8, "too_long": "x" * 7000})
    with pytest.warns(UserWarning, match="note"):
        tracker.log({"loss": 1.0, "acc": torch.tensor(0.5), "note": "text"}, step=0)
    tracker.log({"loss": 0.25}, step=1)
    run_id = tracker.tracker.info.run_id
    tracker.finish()

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    assert client.get_experiment(run.info.experiment_id).name == "proj"
    assert run.data.params == {"lr": "0.01", "batch_size": "8"}
    assert run.data.tags["team"] == "a"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(0, 1.0), (1, 0.25)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "acc")] == [(0, 0.5)]
    assert "note" not in run.data.metrics


def test_mlflow_environment_variables_win_as_in_accelerate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/elsewhere.db")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    monkeypatch.setenv("MLFLOW_TAGS", '{"k": "v"}')
    tracker = MLflowTracker("proj", logging_dir=tmp_path / "logs")
    assert (tracker.tracking_uri, tracker.experiment_name, tracker.tags) == (
        f"sqlite:///{tmp_path}/elsewhere.db", "from-env", {"k": "v"})


def test_artifacts_and_figures_land_beside_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("a")
    tracker = MLflowTracker("artifacts", logging_dir=tmp_path / "logs")
    tracker.start()
    tracker.log_artifact(tmp_path / "notes.txt")
    tracker.log_artifacts(tmp_path / "folder", artifact_path="more")
    figure, axes = plt.subplots()
    axes.plot([1, 2, 3])
    tracker.log_figure(figure, "curve.png")
    plt.close(figure)
    run_id = tracker.tracker.info.run_id
    tracker.finish()

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/logs/mlflow.db")
    assert sorted(a.path for a in client.list_artifacts(run_id)) == ["curve.png", "more", "notes.txt"]
    stored = tmp_path / "logs" / "mlartifacts"
    assert (next(stored.rglob("notes.txt"))).read_text() == "hello"
    assert not (tmp_path / "mlruns").exists()
