"""MLflow: a run in a tracking store, by default an SQLite store under the logging folder."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from accel.tracking.base import GeneralTracker, on_main_process
from accel.tracking.requirements import install_hint, installed
from accel.tracking.values import as_scalar, is_scalar

STORE_FILE = "mlflow.db"
"""The SQLite file a run is written to under the logging folder: MLflow's own default store, moved there."""


class MLflowTracker(GeneralTracker):
    """An MLflow run in experiment `experiment_name` (Accelerate's arguments and environment variables).

    Where it is written, first match wins: `tracking_uri`; `$MLFLOW_TRACKING_URI`;
    `sqlite:///<logging_dir>/mlflow.db` when a logging folder is set (an accel addition: Accelerate
    writes to the current folder); else MLflow's default. Read it back with
    `mlflow ui --backend-store-uri sqlite:///<logging_dir>/mlflow.db` or `MlflowClient(tracking_uri)`.
    `MLFLOW_EXPERIMENT_NAME`, `MLFLOW_RUN_ID`, `MLFLOW_TAGS` (JSON) and `MLFLOW_NESTED_RUN` override
    the arguments, as in Accelerate.
    """

    name = "mlflow"
    requires_logging_directory = False

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | str | None = None,
        nested_run: bool = False,
        run_name: str | None = None,
        description: str | None = None,
        tracking_uri: str | None = None,
    ) -> None:
        super().__init__()
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.logging_dir = logging_dir
        self.run_id = os.environ.get("MLFLOW_RUN_ID", run_id)
        tags = os.environ.get("MLFLOW_TAGS", tags)
        self.tags = json.loads(tags) if isinstance(tags, str) else tags
        nested = os.environ.get("MLFLOW_NESTED_RUN", nested_run)
        self.nested_run = nested.lower() in ("1", "true", "yes") if isinstance(nested, str) else bool(nested)
        self.run_name = run_name
        self.description = description
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or self._local_store_uri()
        self.active_run: Any = None

    def _local_store_uri(self) -> str | None:
        if self.logging_dir is None:
            return None
        return "sqlite:///" + str(Path(self.logging_dir).resolve() / STORE_FILE)

    def _local_artifact_uri(self) -> str | None:
        """Artifacts of a new experiment go beside the local store (MLflow's default is ./mlruns)."""
        if self.logging_dir is None or self.tracking_uri != self._local_store_uri():
            return None
        return (Path(self.logging_dir).resolve() / "mlartifacts").as_uri()

    @staticmethod
    def missing_install() -> str | None:
        """None when mlflow (and, for the default SQLite store, SQLAlchemy and Alembic) is installed."""
        needed = ["mlflow"] if os.environ.get("MLFLOW_TRACKING_URI") else ["mlflow", "sqlalchemy", "alembic"]
        if all(installed(module) for module in needed):
            return None
        return install_hint("mlflow", "mlflow-skinny sqlalchemy alembic")

    @on_main_process
    def start(self) -> None:
        import mlflow

        if self.tracking_uri is not None:
            if self.tracking_uri.startswith("sqlite:///") and self.logging_dir is not None:
                Path(self.logging_dir).mkdir(parents=True, exist_ok=True)
            mlflow.set_tracking_uri(self.tracking_uri)
        found = mlflow.search_experiments(filter_string=f"name = '{self.experiment_name}'")
        if found:
            experiment_id = found[0].experiment_id
        else:
            experiment_id = mlflow.create_experiment(
                name=self.experiment_name,  # type: ignore[arg-type]  # None reaches mlflow, which refuses it (as in Accelerate)
                tags=self.tags, artifact_location=self._local_artifact_uri(),
            )
        self.active_run = mlflow.start_run(
            run_id=self.run_id, experiment_id=experiment_id, run_name=self.run_name,
            nested=self.nested_run, tags=self.tags, description=self.description,
        )

    @property
    def tracker(self) -> Any:
        """The active mlflow Run."""
        return self.active_run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """The hyperparameters as run parameters, in batches of MLflow's limit. A value longer than
        MLflow keeps for a parameter is left out with a warning naming it, as in Accelerate."""
        import mlflow
        from mlflow.utils import validation

        too_long = [k for k, v in values.items() if len(str(v)) > validation.MAX_PARAM_VAL_LENGTH]
        if too_long:
            warnings.warn(
                f"MLflow keeps parameter values of at most {validation.MAX_PARAM_VAL_LENGTH} characters: the "
                f"config values of {too_long} were not logged to MLflow (log them with mlflow.log_text).",
                stacklevel=3,
            )
        values = {k: v for k, v in values.items() if k not in too_long}
        items = list(values.items())
        batch = validation.MAX_PARAMS_TAGS_PER_BATCH
        for start in range(0, len(items), batch):
            mlflow.log_params(dict(items[start : start + batch]))

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers (and one-element tensors) as metrics; MLflow has no metric for other values, so a
        string or dict is warned about and left out, as in Accelerate."""
        import mlflow

        metrics = {k: as_scalar(k, v) for k, v in values.items() if is_scalar(v)}
        skipped = sorted(set(values) - set(metrics))
        if skipped:
            warnings.warn(f"MLflow metrics are numbers: {skipped} were not logged to MLflow.", stacklevel=3)
        mlflow.log_metrics(metrics, step=step, **kwargs)

    @on_main_process
    def log_artifact(self, local_path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Copy the file `local_path` into the run's artifacts (under `artifact_path`)."""
        import mlflow

        mlflow.log_artifact(local_path=str(local_path), artifact_path=artifact_path)

    @on_main_process
    def log_artifacts(self, local_dir: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Copy every file of the folder `local_dir` into the run's artifacts."""
        import mlflow

        mlflow.log_artifacts(local_dir=str(local_dir), artifact_path=artifact_path)

    @on_main_process
    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        """A matplotlib or plotly figure, saved as the artifact `artifact_file` (say "loss.png")."""
        import mlflow

        mlflow.log_figure(figure=figure, artifact_file=artifact_file, **save_kwargs)

    @on_main_process
    def finish(self) -> None:
        """End the active run."""
        import mlflow

        mlflow.end_run()
