"""Kwargs handlers: frozen, validated option objects passed as `Accelerator(kwarg_handlers=[...])`."""

from accel.kwargs_handlers.amp import AutocastKwargs, GradScalerKwargs
from accel.kwargs_handlers.base import KwargsHandler
from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs
from accel.kwargs_handlers.comm_hooks import DDPCommunicationHookType
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.kwargs_handlers.handlers import Handlers, collect_handlers
from accel.kwargs_handlers.monitoring import SpikeDetectionKwargs, ThroughputKwargs
from accel.kwargs_handlers.profile import ProfileKwargs
from accel.kwargs_handlers.torch_distributed import DistributedDataParallelKwargs, InitProcessGroupKwargs

__all__ = [
    "AutocastKwargs",
    "BitsandbytesKwargs",
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "FP8RecipeKwargs",
    "GradScalerKwargs",
    "Handlers",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "ProfileKwargs",
    "SpikeDetectionKwargs",
    "ThroughputKwargs",
    "collect_handlers",
]
