"""accel: run an ordinary PyTorch training script in the precision you ask for.

The public API is imported lazily, so that `accel --help` and `import accel._version`
do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from accel._version import __version__
from accel._warnings import PrecisionWarning

if TYPE_CHECKING:  # explicit re-exports, so that type checkers see the lazy names
    from accel.accelerator import Accelerator as Accelerator
    from accel.accelerator.checkpointing import ProjectConfiguration as ProjectConfiguration
    from accel.kwargs_handlers import AutocastKwargs as AutocastKwargs
    from accel.kwargs_handlers import DistributedDataParallelKwargs as DistributedDataParallelKwargs
    from accel.kwargs_handlers import FP8RecipeKwargs as FP8RecipeKwargs
    from accel.kwargs_handlers import GradScalerKwargs as GradScalerKwargs
    from accel.kwargs_handlers import InitProcessGroupKwargs as InitProcessGroupKwargs

_EXPORTS = {
    "Accelerator": "accel.accelerator",
    "AutocastKwargs": "accel.kwargs_handlers",
    "DistributedDataParallelKwargs": "accel.kwargs_handlers",
    "FP8RecipeKwargs": "accel.kwargs_handlers",
    "GradScalerKwargs": "accel.kwargs_handlers",
    "InitProcessGroupKwargs": "accel.kwargs_handlers",
    "ProjectConfiguration": "accel.accelerator.checkpointing",
}

__all__ = [*_EXPORTS, "PrecisionWarning", "__version__"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'accel' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
