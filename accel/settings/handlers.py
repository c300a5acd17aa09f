"""The kwargs handlers that `accel launch`'s ACCEL_* variables (or Accelerate's) describe.

Where a script passes no FP8RecipeKwargs, FullyShardedDataParallelPlugin or BitsandbytesKwargs,
the Accelerator builds them from the environment with these functions (and `accel launch` checks
a configuration with the same ones before any process starts). Only the variables that are set
become arguments, so a handler's `explicit_fields` name exactly what the user configured.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.settings import BNB_SETTINGS, FP8_SETTINGS, FSDP_OPTION_SETTINGS, USE_FSDP


def fp8_recipe_from_env(environ: Mapping[str, str] | None = None) -> FP8RecipeKwargs | None:
    """The FP8 recipe set by ACCEL_FP8_* variables, or None when none is set.

    Only the variables that are set become arguments, so `explicit_fields` names exactly
    what the user configured. An invalid value raises ValueError naming the variable.
    """
    environ = os.environ if environ is None else environ
    given = {
        setting.yaml_key: setting.parse(environ[setting.env_var], setting.env_var)
        for setting in FP8_SETTINGS
        if setting.env_var in environ
    }
    return FP8RecipeKwargs(**given) if given else None



def fsdp_fields_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """FullyShardedDataParallelPlugin's arguments from ACCEL_USE_FSDP and ACCEL_FSDP_* (or Accelerate's
    ACCELERATE_USE_FSDP and FSDP_*), or None when use_fsdp is not true. Only the variables that are set
    become arguments."""
    environ = os.environ if environ is None else environ
    if not USE_FSDP.from_env(environ):
        return None
    found = {s.keyword: hit for s in FSDP_OPTION_SETTINGS if (hit := s.lookup(environ)) is not None}
    policy = found["auto_wrap_policy"][1] if "auto_wrap_policy" in found else None
    for keyword, wanted in _ACCELERATE_FSDP_POLICY_FIELDS.items():
        # `accelerate launch --use_fsdp` sets these whatever the policy; Accelerate reads each under its policy only
        if keyword in found and found[keyword][0].startswith("FSDP_") and policy != wanted:
            del found[keyword]
    return {keyword: value for keyword, (_, value) in found.items()}

_ACCELERATE_FSDP_POLICY_FIELDS = {"min_num_params": "size_based_wrap", "transformer_cls_names_to_wrap": "transformer_based_wrap"}
"""Plugin fields whose FSDP_* variable Accelerate reads only under this auto_wrap_policy."""


def bnb_options_from_env(environ: Mapping[str, str] | None = None) -> BitsandbytesKwargs | None:
    """The BitsandbytesKwargs set by ACCEL_BNB_* variables, or None when none is set."""
    environ = os.environ if environ is None else environ
    given = {s.keyword: s.parse(environ[s.env_var], s.env_var) for s in BNB_SETTINGS if s.env_var in environ}
    return BitsandbytesKwargs(**given) if given else None
