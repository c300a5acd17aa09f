"""`LocalSGD` at Accelerate's path `accelerate.local_sgd` (it lives in accel.training.local_sgd)."""

from accel.training.local_sgd import LocalSGD

__all__ = ["LocalSGD"]
