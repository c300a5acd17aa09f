"""`PartialState`, `AcceleratorState` and `GradientState` at Accelerate's path `accelerate.state` (see
accel.distributed.partial_state, .state_lifetime and accel.training.gradient_state for what they do and how they
differ from Accelerate's: no singletons; `GradientState()` is the running Accelerator's), and
`is_initialized()`: whether an AcceleratorState is alive and not reset (diffusers reads it)."""

from accel.distributed.partial_state import AcceleratorState, PartialState
from accel.distributed.state_lifetime import is_initialized
from accel.distributed.types import DistributedType
from accel.training.gradient_state import GradientState

__all__ = ["AcceleratorState", "DistributedType", "GradientState", "PartialState", "is_initialized"]
