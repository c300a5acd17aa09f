"""TransformerEngine's side of FP8RecipeKwargs: the TE recipe object, and whether this GPU runs it.

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
    "nvfp4": "NVFP4BlockScaling",
}
"""FP8RecipeKwargs.scaling -> the TE recipe class that runs it."""

ADDED_IN: dict[str, str] = {
    "DelayedScaling": "0.8",
    "Float8CurrentScaling": "2.2",
    "MXFP8BlockScaling": "2.0",
    "Float8BlockScaling": "2.3",
    "NVFP4BlockScaling": "2.8",
}
"""The TE release that added each recipe class (for the error when it is missing)."""

REQUIREMENTS: dict[str, str] = {
    "delayed": "TransformerEngine 2.0+ on an Ada, Hopper or Blackwell GPU (compute capability 8.9+)",
    "current": "TransformerEngine 2.2+ on an Ada, Hopper or Blackwell GPU (compute capability 8.9+)",
    "mxfp8": "TransformerEngine 2.0+ on a Blackwell data-centre GPU (compute capability 10.x: B200, GB200, B300)",
    "block": "TransformerEngine 2.3+ with CUDA 12.9+ on a Hopper GPU (compute capability 9.x; Blackwell too from TE 2.9)",
    "nvfp4": "TransformerEngine 2.8+ on a Blackwell GPU (compute capability 10.0+)",
}
"""What each scaling needs (TE's check_*_support at the versions that added them), for refusals."""

BACKWARD_OVERRIDE_ADDED_IN = "2.15"
"""The TE release whose recipes (all but DelayedScaling, which takes only None) gained `backward_override`."""

FIXED_FORMATS: dict[str, str] = {"nvfp4": "E4M3"}
"""Scalings whose TE recipe takes one fp8_format only: NVFP4BlockScaling asserts E4M3 (for its block scales)."""

DELAYED_ONLY: tuple[str, ...] = ("margin", "amax_history_len", "amax_compute_algo")
"""Recipe fields only DelayedScaling has: the other recipes scale from the current tensor or block."""

_AVAILABILITY_PROBES = {
    "delayed": ("is_fp8_available", "check_fp8_support"),
    "current": ("is_fp8_available", "check_fp8_support"),
    "mxfp8": ("is_mxfp8_available", "check_mxfp8_support"),
    "block": ("is_fp8_block_scaling_available", "check_fp8_block_scaling_support"),
    "nvfp4": ("is_nvfp4_available", "check_nvfp4_support"),
}
"""scaling -> (TE >= 2.9's te.is_*_available(return_reason=True), older TE's transformer_engine.pytorch.fp8
check_*_support()); both answer (supported, reason), as TE's own autocast checks the recipe."""


def build_recipe(recipe_module: ModuleType, recipe: FP8RecipeKwargs, scaling: str) -> Any:
    """The TE recipe for `scaling` with the fields of `recipe` that this TE recipe uses.

    TE's recipes are pydantic dataclasses that drop keywords they do not know, so a field is
    passed only to a class that declares it; one that does not (backward_override before 2.15) is refused.
    """
    name = RECIPE_CLASSES[scaling]
    recipe_class = getattr(recipe_module, name, None)
    if recipe_class is None:
        raise ValueError(
            f"FP8RecipeKwargs(scaling={scaling!r}) runs TransformerEngine's {name}, which the installed "
            f"TransformerEngine does not have (added in {ADDED_IN[name]}); upgrade TransformerEngine or "
            "choose another scaling."
        )
    fields: dict[str, Any] = {}
    if scaling not in FIXED_FORMATS:
        fields["fp8_format"] = recipe_module.Format[recipe.fp8_format]
    if scaling == "delayed":
        fields.update(margin=recipe.margin, amax_history_len=recipe.amax_history_len,
                      amax_compute_algo=recipe.amax_compute_algo)
    if recipe.backward_override is not None:
        if "backward_override" not in getattr(recipe_class, "__dataclass_fields__", {}):
            raise ValueError(
                f"FP8RecipeKwargs(backward_override={recipe.backward_override!r}) needs TransformerEngine "
                f"{BACKWARD_OVERRIDE_ADDED_IN} or newer (its {name} has no backward_override and would drop it); "
                "upgrade TransformerEngine, or leave backward_override out."
            )
        fields["backward_override"] = recipe.backward_override
    return recipe_class(**fields)


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
    if scaling == "nvfp4" and capability < (10, 0):
        return f"NVFP4 block scaling needs a Blackwell GPU (compute capability 10.0 or newer); {shown}"
    if scaling == "mxfp8" and not (10, 0) <= capability < (12, 0):
        return f"MXFP8 block scaling needs a Blackwell data-centre GPU (compute capability 10.x); {shown}"
    if scaling == "block" and (not (9, 0) <= capability < (10, 0) or cuda < (12, 9)):
        return (
            f"FP8 block scaling needs a Hopper GPU (compute capability 9.x) and CUDA 12.9 or newer; {shown}, "
            f"CUDA {torch.version.cuda}"
        )
    return None
