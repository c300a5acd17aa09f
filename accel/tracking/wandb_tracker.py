"""Weights & Biases: a wandb run (online, or offline with WANDB_MODE=offline)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from accel.tracking.base import GeneralTracker, on_main_process
from accel.tracking.requirements import install_hint, installed


class WandBTracker(GeneralTracker):
    """A wandb run in project `run_name` (Accelerate's meaning).

    Args:
        run_name: the wandb project (the `project_name` of `init_trackers`).
        logging_dir: where wandb keeps its local files (`wandb.init(dir=...)`), unless `dir` is
            given; `init_trackers` passes the Accelerator's logging folder. An accel addition:
            Accelerate leaves wandb's files in the current folder.
        **kwargs: passed to `wandb.init(...)`, e.g. `entity`, `name`, `tags`, `mode`.
    """

    name = "wandb"
    requires_logging_directory = False
    main_process_only = False

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        if logging_dir is not None and "dir" not in kwargs:
            self.init_kwargs["dir"] = str(logging_dir)
        self.run: Any = None

    @staticmethod
    def missing_install() -> str | None:
        """None when wandb is installed, else the pip command that fixes it."""
        return None if installed("wandb") else install_hint("wandb", "wandb")

    @on_main_process
    def start(self) -> None:
        import wandb

        if "dir" in self.init_kwargs:
            Path(self.init_kwargs["dir"]).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=self.run_name, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        """The wandb Run."""
        return self.run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """The hyperparameters as the run's config."""
        self.run.config.update(values, allow_val_change=True)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """`run.log(values, step=step, **kwargs)`: wandb takes numbers, strings, tensors, media."""
        self.run.log(values, step=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value a list of images (arrays, tensors or PIL images), logged as `wandb.Image`s."""
        import wandb

        self.run.log({key: [wandb.Image(image) for image in images] for key, images in values.items()},
                     step=step, **kwargs)

    @on_main_process
    def log_table(self, table_name: str, columns: list[str | int] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        """A `wandb.Table` from `columns` and `data` rows, or from a pandas `dataframe`."""
        import wandb

        table = wandb.Table(columns=columns, data=data, dataframe=dataframe)
        self.run.log({table_name: table}, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        """Finish the run (offline: writes the run's files; online: waits for the upload)."""
        self.run.finish()
