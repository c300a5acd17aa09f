"""The Accelerator: its constructor options and its method groups, one file each.

The wrappers it puts around a script's objects live in accel.training and accel.data; they are
re-exported here for code that imports them from this package."""

from accel.accelerator.accelerator import Accelerator
from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.training.accumulation import GradientAccumulationPlugin
from accel.training.optimizer import AcceleratedOptimizer
from accel.training.scheduler import AcceleratedScheduler

__all__ = [
    "AcceleratedOptimizer",
    "AcceleratedScheduler",
    "Accelerator",
    "DataLoaderConfiguration",
    "GradientAccumulationPlugin",
    "PreparedDataLoader",
]
