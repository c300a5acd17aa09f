"""The configuration classes and enums, at Accelerate's path `accelerate.utils.dataclasses`."""

from accel.checkpointing.project import ProjectConfiguration
from accel.data.configuration import DataLoaderConfiguration
from accel.distributed.types import DistributedType, PrecisionType
from accel.kwargs_handlers import (
    AutocastKwargs,
    BitsandbytesKwargs,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
)
from accel.kwargs_handlers.dynamo import DynamoBackend, TorchDynamoPlugin
from accel.kwargs_handlers.fp8_names import AORecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs
from accel.training.accumulation import GradientAccumulationPlugin

__all__ = [
    "AORecipeKwargs",
    "MSAMPRecipeKwargs",
    "TERecipeKwargs",
    "AutocastKwargs",
    "BitsandbytesKwargs",
    "DataLoaderConfiguration",
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "FP8RecipeKwargs",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "ProfileKwargs",
    "TorchDynamoPlugin",
    "DynamoBackend",
    "PrecisionType",
    "ProjectConfiguration",
]
