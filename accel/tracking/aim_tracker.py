"""Aim: a run in the Aim repository under the logging folder."""

from __future__ import annotations

import os
from typing import Any

from accel.tracking.base import GeneralTracker, on_main_process
from accel.tracking.requirements import install_hint, installed


class AimTracker(GeneralTracker):
    """An Aim `Run` named `run_name`, stored in the Aim repository at `logging_dir` (Accelerate's layout).

    Args:
        run_name: the run's name (the `project_name` of `init_trackers`).
        logging_dir: the Aim repository's folder (created when missing).
        **kwargs: passed to `aim.Run(...)`, e.g. `experiment`, `system_tracking_interval`.
    """

    name = "aim"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str] | None = ".", **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.aim_repo_path = logging_dir
        self.init_kwargs = kwargs
        self.writer: Any = None

    @staticmethod
    def missing_install() -> str | None:
        """None when aim is installed, else the pip command that fixes it."""
        return None if installed("aim") else install_hint("aim", "aim")

    @on_main_process
    def start(self) -> None:
        from aim import Run

        self.writer = Run(repo=os.fspath(self.aim_repo_path) if self.aim_repo_path is not None else None,
                          **self.init_kwargs)
        self.writer.name = self.run_name

    @property
    def tracker(self) -> Any:
        """The aim Run."""
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """The hyperparameters as the run's `hparams` entry."""
        self.writer["hparams"] = values

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value tracked as its own sequence: `run.track(value, name=key, step=step, **kwargs)`."""
        for key, value in values.items():
            self.writer.track(value, name=key, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        """Close the run."""
        self.writer.close()
