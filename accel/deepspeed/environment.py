"""The DeepSpeed plugin that `accel launch --use_deepspeed` describes, for a script that builds none in code.

`accel launch` passes use_deepspeed and the deepspeed_config options as ACCEL_USE_DEEPSPEED and
ACCEL_DEEPSPEED_* variables (accel/settings/catalogue.py, accel/settings/deepspeed_names.py; `accelerate
launch`'s ACCELERATE_USE_DEEPSPEED and ACCELERATE_DEEPSPEED_* are read too); the Accelerator builds a
DeepSpeedPlugin from them, as Accelerate does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from accel.settings import DEEPSPEED_OPTION_SETTINGS, USE_DEEPSPEED

_SOURCE = "ACCEL_USE_DEEPSPEED / ACCEL_DEEPSPEED_*, set by `accel launch --use_deepspeed` and the config's deepspeed_config"


def environment_plugin(environ: Mapping[str, str] | None = None) -> Any:
    """The DeepSpeedPlugin `environ` (default os.environ) describes, or None without use_deepspeed true."""
    environ = os.environ if environ is None else environ
    if not USE_DEEPSPEED.from_env(environ):
        return None
    fields = {s.keyword: hit[1] for s in DEEPSPEED_OPTION_SETTINGS if (hit := s.lookup(environ)) is not None}
    from accel.deepspeed.plugin import DeepSpeedPlugin

    try:
        return DeepSpeedPlugin(**fields)
    except (TypeError, ValueError, FileNotFoundError) as error:
        raise type(error)(f"{error} (from {_SOURCE}.)") from None
