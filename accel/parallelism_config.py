"""`ParallelismConfig` at Accelerate's path `accelerate.parallelism_config` (it lives in accel.parallel.config)."""

from accel.parallel.config import ParallelismConfig

__all__ = ["ParallelismConfig"]
