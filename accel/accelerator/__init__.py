"""The Accelerator and the wrappers it puts around a training script's objects."""

from accel.accelerator.accelerator import Accelerator
from accel.data.configuration import DataLoaderConfiguration
from accel.training.accumulation import GradientAccumulationPlugin
from accel.data.loader import PreparedDataLoader
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
