"""TransformerEngine's side of FP8RecipeKwargs: the TE recipe object, whether this GPU runs it,
and TE's autocast context in whichever API generation is installed.

TE's recipes are pydantic dataclasses that silently ignore keyword arguments they do not know,
so only fields accel has checked are passed, by name, to the recipe class that uses them.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import torch

from accel.kwargs_handlers import FP8RecipeKwargs

RECIPE_CLASSES: dict[str, str] = {
    "delayed": "DelayedScaling",
    "current": "Float8CurrentScaling",
    "mxfp8": "MXFP8BlockScaling",
    "block": "Float8BlockScaling",
}
"""FP8RecipeKwargs.scaling -> the TE recipe class that runs it."""

ADDED_IN: dict[str, str] = {
    "DelayedScaling": "0.8",
    "Float8CurrentScaling": "2.2",
    "MXFP8BlockScaling": "2.0",
    "Float8BlockScaling": "2.3",
}
"""The TE release that added each recipe class (for the error when it is missing)."""

DELAYED_ONLY: tuple[str, ...] = ("margin", "amax_history_len", "amax_compute_algo")
"""Recipe fields only DelayedScaling has: the other recipes scale from the current tensor or block."""

_AVAILABILITY_PROBES = {
    "delayed": ("is_fp8_available", "check_fp8_support"),
    "current": ("is_fp8_available", "check_fp8_support"),
    "mxfp8": ("is_mxfp8_available", "check_mxfp8_support"),
    "block": ("is_fp8_block_scaling_available", "check_fp8_block_scaling_support"),
}
"""scaling -> (TE >= 2.9's te.is_*_available(return_reason=True), older TE's transformer_engine.pytorch.fp8
check_*_support()); both answer (supported, reason), as TE's own autocast checks the recipe."""


def build_recipe(recipe_module: ModuleType, recipe: FP8RecipeKwargs, scaling: str) -> Any:
    """The TE recipe for `scaling` with the fields of `recipe` that this TE recipe uses."""
    name = RECIPE_CLASSES[scaling]
    recipe_class = getattr(recipe_module, name, None)
    if recipe_class is None:
        raise ValueError(
            f"FP8RecipeKwargs(scaling={scaling!r}) runs TransformerEngine's {name}, which the installed "
            f"TransformerEngine does not have (added in {ADDED_IN[name]}); upgrade TransformerEngine or "
            "choose another scaling."
        )
    fp8_format = recipe_module.Format[recipe.fp8_format]
    if scaling == "delayed":
        return recipe_class(
            fp8_format=fp8_format,
            margin=recipe.margin,
            amax_history_len=recipe.amax_history_len,
            amax_compute_algo=recipe.amax_compute_algo,
        )
    return recipe_class(fp8_format=fp8_format)


def recipe_support_reason(te: ModuleType, scaling: str, device: torch.device) -> str | None:
    """Why this GPU cannot run `scaling`, or None: TE's own answer where the installed TE gives one
    (te.is_*_available from 2.9, transformer_engine.pytorch.fp8.check_*_support before), else TE's
    documented rules."""
    available, check = _AVAILABILITY_PROBES[scaling]
    probe = getattr(te, available, None)
    if probe is not None:
        supported, reason = probe(return_reason=True)
    else:
        legacy = getattr(sys.modules.get(f"{te.__name__}.fp8"), check, None)
        if legacy is None:
            return _capability_reason(scaling, device)
        supported, reason = legacy()
    return None if supported else f"TransformerEngine says: {reason}"


def _capability_reason(scaling: str, device: torch.device) -> str | None:
    """TE's documented rules (TE 2.3-2.8's check_*_support), for a TE that answers none itself."""
    if scaling in ("delayed", "current") and device.type != "cuda":
        return None  # availability() has given the reason already
    capability = torch.cuda.get_device_capability(device)
    shown = f"{torch.cuda.get_device_name(device)} has compute capability {capability[0]}.{capability[1]}"
    cuda = tuple(int(part) for part in (torch.version.cuda or "0.0").split(".")[:2])
    if scaling in ("delayed", "current") and capability < (9, 0) and cuda < (12, 1):
        return f"FP8 on Ada (compute capability 8.9) needs CUDA 12.1 or newer (and cuBLASLt 12.1.3); CUDA {torch.version.cuda}"
    if scaling == "mxfp8" and not (10, 0) <= capability < (12, 0):
        return f"MXFP8 block scaling needs a Blackwell data-centre GPU (compute capability 10.x); {shown}"
    if scaling == "block" and (not (9, 0) <= capability < (10, 0) or cuda < (12, 9)):
        return (
            f"FP8 block scaling needs a Hopper GPU (compute capability 9.x) and CUDA 12.9 or newer; {shown}, "
            f"CUDA {torch.version.cuda}"
        )
    return None


class TEAutocast:
    """Opens TE's autocast for one recipe, in the API the installed TE has.

    TE 2.9 and newer: ``te.autocast(enabled=, recipe=, amax_reduction_group=)``; older:
    ``te.fp8_autocast(enabled=, fp8_recipe=, fp8_group=)`` (the keywords changed with the name).
    With several processes, `group` (the default process group) is where TE reduces the amaxes,
    so that every replica scales alike. A class, not a closure, so a prepared model stays picklable.
    """

    __slots__ = ("_function", "_keyword", "_arguments")

    def __init__(self, te: ModuleType, recipe: Any, group: Any = None) -> None:
        function = getattr(te, "autocast", None)
        self._keyword = "recipe" if function is not None else "fp8_recipe"
        self._function = function if function is not None else te.fp8_autocast
        self._arguments: dict[str, Any] = {self._keyword: recipe}
        if group is not None:
            self._arguments["amax_reduction_group" if function is not None else "fp8_group"] = group

    @property
    def api(self) -> str:
        """Which TE function opens the context: 'autocast' or 'fp8_autocast'."""
        return "autocast" if self._keyword == "recipe" else "fp8_autocast"

    def __call__(self, enabled: bool) -> Any:
        return self._function(enabled=enabled, **self._arguments)
