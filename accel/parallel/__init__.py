"""N-D parallelism: ParallelismConfig (Accelerate's), the device mesh built from it, and how the
Accelerator's strategy and data loading follow it.

config.py: ParallelismConfig, its sizes checked at construction (torch-free, shared with `accel launch`).
layout.py: the config an Accelerator runs with (keyword, environment, FSDP's HYBRID_SHARD), checked
against the world size and the FSDP plugin. mesh.py: the torch DeviceMesh with Accelerate's
dimension names and flattened dimensions. Tensor parallelism lives in tensor_parallel.py and
tensor_strategy.py. Imported lazily: `accel.parallel.names` must stay torch-free for the settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.parallel.config import ParallelismConfig as ParallelismConfig

__all__ = ["ParallelismConfig"]


def __getattr__(name: str) -> Any:
    if name == "ParallelismConfig":
        from accel.parallel.config import ParallelismConfig

        return ParallelismConfig
    raise AttributeError(f"module 'accel.parallel' has no attribute {name!r}")
