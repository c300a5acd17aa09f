"""`PartialState` and `AcceleratorState` at Accelerate's path `accelerate.state` (see
accel.accelerator.partial_state for what they do and how they differ from Accelerate's)."""

from accel.accelerator.partial_state import AcceleratorState, PartialState
from accel.accelerator.types import DistributedType

__all__ = ["AcceleratorState", "DistributedType", "PartialState"]
