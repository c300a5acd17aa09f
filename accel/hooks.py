"""`accelerate.hooks` (the module hooks of big-model inference), Accelerate's own: forwarded when
accelerate is installed, else a stand-in that raises ImportError naming the install when used
(accel/_accelerate_names.py). accel's training does not use them."""

from accel._accelerate_names import forwarding

__getattr__ = forwarding("accelerate.hooks", None, __name__)
