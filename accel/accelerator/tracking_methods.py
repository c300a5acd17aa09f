"""The Accelerator's experiment tracking: `log_with=`, `init_trackers`, `log`, `get_tracker`.

Accelerate's names and meanings; the trackers themselves live in accel.tracking.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any

from accel.tracking import GeneralTracker
from accel.tracking.selection import LogWith, Selected, check_tracker_kwargs, create_trackers, filter_trackers

logger = logging.getLogger("accel")


class TrackingMixin:
    """Experiment trackers for the Accelerator. Only the main process creates trackers and logs
    (Accelerate's behaviour); on the other processes these methods do nothing."""

    project_configuration: Any
    is_main_process: bool
    precision: Any

    def _setup_tracking(self, log_with: LogWith | Sequence[LogWith] | None) -> None:
        """Check `log_with` at construction: unknown names, missing libraries and a missing logging
        folder raise here, on every process, before any training."""
        self.log_with: list[Selected] = filter_trackers(log_with, self.logging_dir)
        self._trackers: list[GeneralTracker] = []
        self._told_log_goes_nowhere = False
        self._told_health_goes_nowhere = False
        if self.is_main_process:
            self.precision.report_health(self._log_health)

    def _log_health(self, values: dict[str, float], step: int, summary: str) -> None:
        """Where the precision's health reports go (FP8RecipeKwargs.health_interval): `values` to every
        running tracker at `step` (the optimizer step), `summary` to the "accel" logger (INFO)."""
        logger.info(summary)
        if self._trackers:
            for tracker in self._trackers:
                tracker.log(values, step=step)
        elif not self._told_health_goes_nowhere:
            self._told_health_goes_nowhere = True
            warnings.warn(
                f"FP8 health at optimizer step {step} went to no tracker (only its summary to the 'accel' logger): "
                "none is running. Pass Accelerator(log_with=..., project_dir=...) and call init_trackers() before "
                "training; this is said once.", UserWarning, stacklevel=2)

    @property
    def logging_dir(self) -> str | None:
        """Where trackers write: the project configuration's `logging_dir`, else its `project_dir` (a str, as
        Accelerate's)."""
        config = self.project_configuration
        folder = getattr(config, "logging_dir", None) or config.project_dir
        return None if folder is None else str(folder)

    @property
    def trackers(self) -> list[GeneralTracker]:
        """The running trackers (empty before `init_trackers`, after `end_training`, and off the main process)."""
        return self._trackers

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Start a run named `project_name` in every tracker of `log_with`, recording `config` as its
        hyperparameters (main process only; elsewhere it checks its arguments and returns).

        Raises RuntimeError when the trackers are running already (`end_training` closes them).

        Args:
            project_name: The run's (or project's) name, a non-empty str.
            config: Hyperparameters to record with the run.
            init_kwargs: Maps a tracker name to keyword arguments for its constructor, e.g.
                `{"wandb": {"tags": ["baseline"]}}`; a name not in `log_with` raises.
        """
        options = check_tracker_kwargs("init_kwargs", init_kwargs, self.log_with)
        if not isinstance(project_name, (str, os.PathLike)) or not str(project_name):
            raise TypeError(f"init_trackers(project_name={project_name!r}): give the run's name as a non-empty str.")
        if not self.is_main_process:
            return
        if self._trackers:
            raise RuntimeError(
                "init_trackers() was already called: the trackers are running. Call end_training() to close "
                "them before starting new runs."
            )
        trackers = create_trackers(self.log_with, str(project_name), self.logging_dir, options)
        for tracker in trackers:
            tracker.start()
        if config is not None:
            for tracker in trackers:
                tracker.store_init_configuration(config)
        self._trackers = trackers

    def log(
        self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, dict[str, Any]] | None = None
    ) -> None:
        """Log `values` to every tracker at `step` (main process only; elsewhere it does nothing).

        Without `log_with` the values go nowhere (as in Accelerate), and the first call warns once.
        With trackers asked for but not started (before `init_trackers`, or after `end_training`),
        it raises RuntimeError rather than lose the values.

        Args:
            values: Names to numbers (or what the trackers accept: strings, images...).
            step: The step to log at; None: each tracker's own count.
            log_kwargs: Maps a tracker name to extra keyword arguments for its `log`, e.g.
                `{"wandb": {"commit": False}}`.

        Example:
            ```python
            accelerator = Accelerator(log_with="tensorboard", project_dir="runs")
            accelerator.init_trackers("demo", config={"lr": 1e-3})
            accelerator.log({"loss": 0.25}, step=10)
            accelerator.end_training()
            ```
        """
        if not self.is_main_process:
            return
        if not self.log_with:
            if not self._told_log_goes_nowhere:
                self._told_log_goes_nowhere = True
                warnings.warn(
                    f"accelerator.log({sorted(values) if isinstance(values, dict) else values!r}) logs nowhere: no "
                    "tracker was asked for. Pass Accelerator(log_with='tensorboard' (or 'wandb', 'mlflow', 'all', ...), "
                    "project_dir=...) and call init_trackers(); this is said once.", UserWarning, stacklevel=2)
            return
        if not self._trackers:
            raise RuntimeError(
                "log() before init_trackers() (or after end_training()): no tracker is running, so these values "
                "would be lost. Call accelerator.init_trackers(project_name) first."
            )
        options = check_tracker_kwargs("log_kwargs", log_kwargs, self.log_with) if log_kwargs else {}
        for tracker in self._trackers:
            extra = options.get(tracker.name, {})
            tracker.log(values, step=step, **extra)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The running tracker called `name`.

        As in Accelerate: with no tracker running (before `init_trackers`, or on a process other
        than the main one), a blank `GeneralTracker` whose methods do nothing, so code calling it
        runs everywhere; a name not among the running trackers raises ValueError.

        Args:
            name: The tracker's name (`"tensorboard"`, `"wandb"`, ...).
            unwrap: True gives the library's own object (a SummaryWriter, a wandb run...).

        Returns:
            The tracker, its library object, or a blank tracker.
        """
        if not self._trackers:
            return GeneralTracker(_blank=True)
        for tracker in self._trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        running = [tracker.name for tracker in self._trackers]
        raise ValueError(f"get_tracker({name!r}): no such tracker is running; running: {running}.")

    def _finish_trackers(self) -> None:
        """Close every tracker (called by `end_training`); `init_trackers` may then start new runs."""
        trackers, self._trackers = self._trackers, []
        for tracker in trackers:
            tracker.finish()
