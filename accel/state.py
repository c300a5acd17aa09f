"""`PartialState`, `AcceleratorState` and `GradientState` at Accelerate's path `accelerate.state` (see
accel.accelerator.partial_state and accel.accelerator.gradient_state for what they do and how they
differ from Accelerate's: no singletons; `GradientState()` is the running Accelerator's)."""

from accel.accelerator.gradient_state import GradientState
from accel.accelerator.partial_state import AcceleratorState, PartialState
from accel.accelerator.types import DistributedType

__all__ = ["AcceleratorState", "DistributedType", "GradientState", "PartialState"]
