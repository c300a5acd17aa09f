"""`set_seed`, at Accelerate's path `accelerate.utils.random`."""

from accel.training.seeding import set_seed

__all__ = ["set_seed"]
