"""Version checks at Accelerate's path `accelerate.utils.versions`."""

from accel.utils.imports import compare_versions, is_torch_version

__all__ = ["compare_versions", "is_torch_version"]
