"""`accel.utils`: the names scripts import from `accelerate.utils`, at the same names.

This package re-exports; the logic lives in accel.accelerator (and accel.kwargs_handlers). The
functional collectives (`gather`, `reduce`, ...) act on this process's current state, the
layout torchrun gave it and the running process group. See docs/migration.md for each name's
status and its differences from Accelerate.
"""

from __future__ import annotations

from typing import Any

from accel.accelerator.availability import (
    is_cuda_available,
    is_mps_available,
    is_npu_available,
    is_torch_version,
    is_xpu_available,
)
from accel.accelerator.memory import (
    clear_device_cache,
    find_executable_batch_size,
    release_memory,
    should_reduce_batch_size,
)
from accel.accelerator.seeding import set_seed
from accel.accelerator.skipping import skip_first_batches
from accel.utils.dataclasses import (
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    DistributedType,
    FP8RecipeKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    PrecisionType,
    ProjectConfiguration,
)
from accel.utils.operations import (
    CannotPadNestedTensorWarning,
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
    send_to_device,
    wait_for_everyone,
)

_FROM_TRACKING = ("LoggerType",)
"""Names that live in accel.tracking, imported on first use."""

__all__ = [
    "AutocastKwargs",
    "CannotPadNestedTensorWarning",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "FP8RecipeKwargs",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "PrecisionType",
    "ProjectConfiguration",
    "broadcast",
    "broadcast_object_list",
    "clear_device_cache",
    "find_executable_batch_size",
    "gather",
    "gather_object",
    "is_cuda_available",
    "is_mps_available",
    "is_npu_available",
    "is_torch_version",
    "is_xpu_available",
    "pad_across_processes",
    "reduce",
    "release_memory",
    "send_to_device",
    "set_seed",
    "should_reduce_batch_size",
    "skip_first_batches",
    "wait_for_everyone",
    *_FROM_TRACKING,
]


def __getattr__(name: str) -> Any:
    if name in _FROM_TRACKING:
        import accel.tracking

        value = getattr(accel.tracking, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'accel.utils' has no attribute {name!r}")
