"""TransformerEngine's side of FP8RecipeKwargs: the TE recipe object, whether this GPU runs it,
and TE's autocast context in whichever API generation is installed.

TE's recipes are pydantic dataclasses that silently ignore keyword arguments they do not know,
so only fields accel has checked are passed, by name, to the recipe class that uses them.
"""

from __future__ import annotations

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

_AVAILABILITY_PROBES = {"mxfp8": "is_mxfp8_available", "block": "is_fp8_block_scaling_available"}


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
    """Why this GPU cannot run `scaling` (block-scaled recipes need newer GPUs), or None."""
    probe_name = _AVAILABILITY_PROBES.get(scaling)
    if probe_name is None:
        return None  # delayed and current need what every TE FP8 recipe needs: checked by availability()
    probe = getattr(te, probe_name, None)
    if probe is not None:
        supported, reason = probe(return_reason=True)
        return None if supported else f"TransformerEngine says: {reason}"
    return _capability_reason(scaling, device)


def _capability_reason(scaling: str, device: torch.device) -> str | None:
    """TE's documented rules, for TE versions without the is_*_available helpers."""
    capability = torch.cuda.get_device_capability(device)
    shown = f"{torch.cuda.get_device_name(device)} has compute capability {capability[0]}.{capability[1]}"
    if scaling == "mxfp8" and not (10, 0) <= capability < (12, 0):
        return f"MXFP8 block scaling needs a Blackwell data-centre GPU (compute capability 10.x); {shown}"
    if scaling == "block":
        cuda = tuple(int(part) for part in (torch.version.cuda or "0.0").split(".")[:2])
        if capability < (9, 0) or cuda < (12, 9):
            return (
                f"FP8 block scaling needs compute capability 9.0 or newer and CUDA 12.9 or newer; {shown}, "
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
