"""LoggerType: the tracker names `log_with=` accepts, as an enum (Accelerate's `accelerate.utils.LoggerType`)."""

from __future__ import annotations

import enum
from typing import Any


class _ContainsValues(enum.EnumMeta):
    """`"tensorboard" in LoggerType` is True: membership tests values as well as members."""

    def __contains__(cls, item: Any) -> bool:
        try:
            cls(item)
        except ValueError:
            return False
        return True


class LoggerType(str, enum.Enum, metaclass=_ContainsValues):
    """Experiment trackers by name. `str(LoggerType.TENSORBOARD)` is "tensorboard".

    accel provides ALL, TENSORBOARD, WANDB, MLFLOW, AIM and JSONL (its own, with no dependency).
    The other members are Accelerate's names for trackers accel does not ship; `log_with=` with one
    of them raises at construction and says how to plug the library in as a custom tracker.
    """

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"
    JSONL = "jsonl"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def list(cls) -> list[str]:
        """Every member's value."""
        return [str(member) for member in cls]
