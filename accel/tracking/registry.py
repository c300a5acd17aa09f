"""Tracker names -> classes, and which of them can run here."""

from __future__ import annotations

import warnings

from accel.tracking.aim_tracker import AimTracker
from accel.tracking.base import GeneralTracker
from accel.tracking.jsonl_tracker import JSONLinesTracker
from accel.tracking.logger_type import LoggerType
from accel.tracking.mlflow_tracker import MLflowTracker
from accel.tracking.tensorboard_tracker import TensorBoardTracker
from accel.tracking.wandb_tracker import WandBTracker

LOGGER_TYPE_TO_CLASS: dict[str, type[GeneralTracker]] = {
    "aim": AimTracker,
    "jsonl": JSONLinesTracker,
    "mlflow": MLflowTracker,
    "tensorboard": TensorBoardTracker,
    "wandb": WandBTracker,
}
"""Every tracker `log_with=` can name (Accelerate's name for this table); `register_tracker_class` adds to it."""

BUILT_IN = tuple(LOGGER_TYPE_TO_CLASS)

NOT_PROVIDED = ("clearml", "comet_ml", "dvclive", "swanlab", "trackio")
"""Accelerate's trackers that accel does not ship."""


def missing_install(tracker_class: type[GeneralTracker]) -> str | None:
    """The pip command a tracker class's library needs, or None when it can run here.

    A class without a `missing_install` static method (a user's) needs nothing.
    """
    check = getattr(tracker_class, "missing_install", None)
    return check() if callable(check) else None


def get_available_trackers() -> list[LoggerType]:
    """The built-in trackers whose libraries are installed (what `log_with="all"` selects)."""
    return [LoggerType(name) for name in BUILT_IN if missing_install(LOGGER_TYPE_TO_CLASS[name]) is None]


def register_tracker_class(tracker_class: type[GeneralTracker]) -> None:
    """Make a custom `GeneralTracker` subclass selectable by its `name` in `log_with=` (as in Accelerate).

    `init_trackers` builds it as `tracker_class(project_name, **init_kwargs[name])`, with the logging
    folder as second positional argument when `requires_logging_directory` is true.
    """
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
        raise ValueError(
            f"register_tracker_class({tracker_class!r}): give a subclass of accel.tracking.GeneralTracker."
        )
    if not isinstance(getattr(tracker_class, "name", None), str) or not tracker_class.name:
        raise ValueError(f"register_tracker_class({tracker_class.__name__}): the class needs a non-empty `name` str.")
    if not hasattr(tracker_class, "requires_logging_directory"):
        raise ValueError(
            f"register_tracker_class({tracker_class.__name__}): the class needs a `requires_logging_directory` "
            "attribute (True when it writes under the logging folder, else False)."
        )
    if tracker_class.name in LOGGER_TYPE_TO_CLASS:
        warnings.warn(
            f"register_tracker_class: {tracker_class.__name__} replaces the tracker registered as "
            f"{tracker_class.name!r} ({LOGGER_TYPE_TO_CLASS[tracker_class.name].__name__}).",
            stacklevel=2,
        )
    LOGGER_TYPE_TO_CLASS[tracker_class.name] = tracker_class
