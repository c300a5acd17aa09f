"""torchao's side of FP8RecipeKwargs: the Float8LinearConfig for a recipe, and the one for eval.

torchao (0.10 and newer) scales dynamically, from the current tensor: `scaling` picks one of its
recipes. Its tensorwise recipe is HYBRID (E4M3 input and weight, E5M2 output gradient); E4M3
casts the output gradient to E4M3 as well. Its rowwise recipes are E4M3 throughout.
torchao is imported by these functions only, so that `import accel` does not import it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from accel.backends.fp8.ao_import import import_torchao
from accel.kwargs_handlers import FP8RecipeKwargs

AO_RECIPES: dict[str, str] = {
    "current": "tensorwise",
    "rowwise": "rowwise",
    "rowwise_with_gw_hp": "rowwise_with_gw_hp",
}
"""FP8RecipeKwargs.scaling -> torchao's Float8LinearConfig.from_recipe_name name."""

ROWWISE_FORMAT = "E4M3"
"""The only format torchao's rowwise recipes run (E4M3 for gradients too)."""


FSDP_FP8_ALL_GATHER = ("current",)
"""The scalings whose weights FSDP2 can all-gather in FP8 (torchao's enable_fsdp_float8_all_gather is tensorwise only)."""


def float8_config(recipe: FP8RecipeKwargs, scaling: str, fsdp_float8_all_gather: bool = False) -> Any:
    """torchao's Float8LinearConfig for `scaling` in `recipe.fp8_format`, with `pad_inner_dim` on.

    CUDA's `_scaled_mm` needs the contracted dimension to be a multiple of 16; for the weight
    gradient that is the token count, which a last partial batch breaks. torchao pads it with
    zeros (which add nothing to the product) when `pad_inner_dim` is set, as Accelerate sets it.
    `fsdp_float8_all_gather` (a scaling in FSDP_FP8_ALL_GATHER): FSDP2 casts each weight shard to
    FP8 before its all-gather, so that the weights travel in 8 bits (torchtitan's setting).
    """
    import_torchao()
    from torchao.float8 import CastConfig, Float8LinearConfig

    config = dataclasses.replace(
        Float8LinearConfig.from_recipe_name(AO_RECIPES[scaling]), pad_inner_dim=True,
        enable_fsdp_float8_all_gather=fsdp_float8_all_gather,
    )
    if scaling == "current" and recipe.fp8_format == "E4M3":
        e4m3 = config.cast_config_input.target_dtype
        config = dataclasses.replace(
            config,
            cast_config_grad_output=CastConfig(target_dtype=e4m3),
            cast_config_grad_output_for_grad_weight=CastConfig(target_dtype=e4m3),
        )
    return config


def high_precision_config() -> Any:
    """A Float8LinearConfig whose three GEMMs run in the weights' own precision (no FP8 cast).

    torchao's documented ScalingType.DISABLED leaves a tensor in its original precision; the
    eval-mode switch of the ao backend installs this config while the model is not training.
    """
    import_torchao()
    from torchao.float8 import CastConfig, Float8LinearConfig, ScalingType

    def off() -> Any:
        return CastConfig(scaling_type=ScalingType.DISABLED)

    return Float8LinearConfig(cast_config_input=off(), cast_config_weight=off(), cast_config_grad_output=off())
