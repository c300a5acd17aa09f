"""`accelerate.utils.modeling` (device maps, checkpoint loading for big-model inference), Accelerate's
own: forwarded when accelerate is installed, else a stand-in that raises ImportError naming the
install when used (accel/_accelerate_names.py)."""

from accel._accelerate_names import forwarding

__getattr__ = forwarding("accelerate.utils.modeling", None, __name__)
