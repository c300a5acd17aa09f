"""The FSDP plugin that `accel launch --use_fsdp` describes, for a script that builds none in code.

`accel launch` passes use_fsdp and the fsdp_config options as ACCEL_USE_FSDP and ACCEL_FSDP_*
variables (accel/settings/catalogue.py); the Accelerator builds a FullyShardedDataParallelPlugin from them
when its `fsdp_plugin` argument is None, as Accelerate does with ACCELERATE_USE_FSDP, so that a
launched script with no plugin in its code trains sharded.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from accel.settings.handlers import fsdp_fields_from_env

_SOURCE = "ACCEL_USE_FSDP / ACCEL_FSDP_*, set by `accel launch --use_fsdp` and the config file's fsdp_config"


def with_environment_plugin(plugin: Any) -> Any:
    """`plugin` when given (with a warning if the environment describes another), else the environment's, else None."""
    from_env = environment_plugin()
    if plugin is None:
        return from_env
    if from_env is not None and plugin != from_env:
        warnings.warn(
            f"the fsdp_plugin given in the code overrides the one from {_SOURCE}: {from_env}.",
            UserWarning,
            stacklevel=4,
        )
    return plugin


def environment_plugin(environ: Mapping[str, str] | None = None) -> Any:
    """The FullyShardedDataParallelPlugin that `environ` (default os.environ) describes, or None without
    ACCEL_USE_FSDP=true. A value the plugin refuses raises its error, naming the variables it came from.
    """
    fields = fsdp_fields_from_env(environ)
    if fields is None:
        return None
    from accel.fsdp import FullyShardedDataParallelPlugin

    try:
        return FullyShardedDataParallelPlugin(**fields)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{error} (from {_SOURCE}.)") from None
