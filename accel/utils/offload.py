"""`accelerate.utils.offload` (weights offloaded to disk for big-model inference), Accelerate's own:
forwarded when accelerate is installed, else a stand-in that raises ImportError naming the install
when used (accel/_accelerate_names.py)."""

from accel._accelerate_names import forwarding

__getattr__ = forwarding("accelerate.utils.offload", None, __name__)
