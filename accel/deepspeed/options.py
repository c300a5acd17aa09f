"""The Accelerator's DeepSpeed options at construction: the plugin (from the code, or from `accel launch
--use_deepspeed`), the precision and accumulation steps it agrees on with the Accelerator, and what cannot run
with it (FSDP, tensor parallelism, bitsandbytes, torch.compile), refused with the reason."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from accel.backends.deepspeed import DeepSpeedPrecision, deepspeed_precision
from accel.deepspeed import config as ds_config
from accel.deepspeed.environment import environment_plugin
from accel.deepspeed.plugin import DeepSpeedPlugin
from accel.kwargs_handlers import Handlers
from accel.settings import GRADIENT_ACCUMULATION_STEPS, MIXED_PRECISION


def resolve_plugin(plugin: Any, fsdp_plugin: Any) -> DeepSpeedPlugin | None:
    """The plugin given (checked), else the one `accel launch --use_deepspeed` describes, else None."""
    from_env = environment_plugin()
    if plugin is None:
        plugin = from_env
    elif from_env is not None:
        warnings.warn(f"the deepspeed_plugin given in the code overrides the one from ACCEL_USE_DEEPSPEED / "
                      f"ACCEL_DEEPSPEED_* ({from_env}).", UserWarning, stacklevel=3)
    if plugin is None:
        return None
    if not isinstance(plugin, DeepSpeedPlugin):
        raise TypeError(f"Accelerator(deepspeed_plugin={plugin!r}): give a DeepSpeedPlugin (from accel.utils import "
                        "DeepSpeedPlugin). Several named plugins (a dict) are not supported: give one.")
    if fsdp_plugin is not None:
        raise ValueError("Accelerator got deepspeed_plugin and fsdp_plugin: both shard the model, with different "
                         "engines. Keep one of them.")
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        raise ImportError("deepspeed_plugin needs DeepSpeed: pip install 'accel[deepspeed]' (or pip install deepspeed).")
    return plugin


def precision_keyword(plugin: DeepSpeedPlugin | None, keyword: str | None) -> str | None:
    """With no precision given in the code or the environment, the one the DeepSpeed JSON enables."""
    if plugin is None or keyword is not None or MIXED_PRECISION.lookup() is not None:
        return keyword
    return ds_config.precision_name(plugin, None)


def steps_keyword(plugin: DeepSpeedPlugin | None, given: int | None) -> int | None:
    """The accumulation steps the plugin and the Accelerator (code or environment) agree on; ValueError naming both."""
    if plugin is None:
        return given
    found = GRADIENT_ACCUMULATION_STEPS.lookup()
    return ds_config.accumulation_steps(plugin, given if given is not None else (found[1] if found else None))


def backend(
    plugin: DeepSpeedPlugin, name: str, device: torch.device, handlers: Handlers, *, quantized: bool,
    parallelism: Any, dynamo_backend: str | None,
) -> DeepSpeedPrecision:
    """The precision DeepSpeed runs, checked against the JSON; what cannot run under DeepSpeed is refused."""
    if quantized:
        raise ValueError("BitsandbytesKwargs with a DeepSpeedPlugin: ZeRO partitions each weight as a flat float "
                         "buffer, which bitsandbytes' packed 4/8-bit weights are not. Quantize without DeepSpeed "
                         "(DDP or FSDP2), or train DeepSpeed without BitsandbytesKwargs.")
    if parallelism is not None and not getattr(parallelism, "deepspeed_ulysses", False):
        raise ValueError("parallelism_config with a DeepSpeedPlugin: accel's device meshes (tensor parallelism, "
                         "HSDP, sp_backend='torch') run on DDP/FSDP2, not inside DeepSpeed's engine. Keep one of them, "
                         "or give sp_backend='deepspeed' for DeepSpeed's own sequence parallelism.")
    if dynamo_backend not in (None, "no", "NO"):
        raise ValueError(f"dynamo_backend={dynamo_backend!r} with a DeepSpeedPlugin: compiling the engine is not "
                         "provided. Leave dynamo_backend 'no', or train without DeepSpeed.")
    ds_config.gather_one_at_a_time_on_gloo(plugin, device)
    precision = deepspeed_precision(name, device, handlers)
    ds_config.check_precision(plugin, precision)
    plugin.set_deepspeed_weakref(precision.config_sections())
    return precision
