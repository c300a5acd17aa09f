"""The Accelerator and the wrappers it puts around a training script's objects."""

from accel.accelerator.accelerator import Accelerator
from accel.accelerator.configs import DataLoaderConfiguration, GradientAccumulationPlugin
from accel.accelerator.data import PreparedDataLoader
from accel.accelerator.optimizer import AcceleratedOptimizer
from accel.accelerator.scheduler import AcceleratedScheduler

__all__ = [
    "AcceleratedOptimizer",
    "AcceleratedScheduler",
    "Accelerator",
    "DataLoaderConfiguration",
    "GradientAccumulationPlugin",
    "PreparedDataLoader",
]
