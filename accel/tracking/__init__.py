"""Experiment trackers: `Accelerator(log_with=...)`, `init_trackers`, `log`, `end_training`.

Accelerate's names: `GeneralTracker` for custom trackers, `LoggerType`, `filter_trackers`,
`register_tracker_class`, `get_available_trackers`, and one class per library. Each library is
an optional extra (`pip install "accel[tensorboard]"`); `JSONLinesTracker` ("jsonl") needs none.
See docs/tracking.md.

Accelerate's trackers for the libraries accel does not ship (Comet ML, ClearML, DVCLive, SwanLab,
Trackio) can be imported, so that a script importing one still runs; building one raises
NotImplementedError saying to wrap the library in a GeneralTracker subclass.

The modules, by job:

* choosing trackers: base.py (`GeneralTracker`, the base class of every tracker, built-in or the
  user's), logger_type.py (`LoggerType`: the names `log_with=` accepts), registry.py (tracker names
  -> classes, and which of them can run here), selection.py (`log_with=` checked at construction,
  and the trackers `init_trackers` builds), requirements.py (which libraries are installed, and the
  pip command for a missing one), values.py (what a script logs, as plain Python values);
* one tracker per library: jsonl_tracker.py (accel's own: JSON lines, and a PNG of every scalar at
  the end) with plot.py (those PNGs, FP8 health included), tensorboard_tracker.py (TensorBoard event
  files), wandb_tracker.py (a Weights & Biases run), mlflow_tracker.py (an MLflow run, by default in
  an SQLite store), aim_tracker.py (a run in an Aim repository).
"""

from accel._accelerate_names import refusals
from accel.tracking.aim_tracker import AimTracker
from accel.tracking.base import GeneralTracker, on_main_process
from accel.tracking.jsonl_tracker import JSONLinesTracker
from accel.tracking.logger_type import LoggerType
from accel.tracking.mlflow_tracker import MLflowTracker
from accel.tracking.registry import LOGGER_TYPE_TO_CLASS, get_available_trackers, register_tracker_class
from accel.tracking.selection import filter_trackers
from accel.tracking.tensorboard_tracker import TensorBoardTracker
from accel.tracking.wandb_tracker import WandBTracker

__all__ = [
    "LOGGER_TYPE_TO_CLASS",
    "AimTracker",
    "GeneralTracker",
    "JSONLinesTracker",
    "LoggerType",
    "MLflowTracker",
    "TensorBoardTracker",
    "WandBTracker",
    "filter_trackers",
    "get_available_trackers",
    "on_main_process",
    "register_tracker_class",
]

_NOT_SHIPPED = (
    "accel does not ship this tracker; wrap the library in a GeneralTracker subclass (docs/tracking.md) "
    "and pass an instance as log_with."
)
__getattr__ = refusals(
    dict.fromkeys(("CometMLTracker", "ClearMLTracker", "DVCLiveTracker", "SwanLabTracker", "TrackioTracker"), _NOT_SHIPPED),
    __name__,
)
