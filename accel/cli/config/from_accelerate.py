"""Read a Hugging Face Accelerate config.yaml: keep what accel understands, name the rest once.

Accelerate's keys that accel shares (mixed_precision, num_processes, ...) and its FP8 spellings
(backend TE/MSAMP/AO, amax_history_length, amax_compute_algorithm, opt_level) pass through to
the ordinary checks. `distributed_type: MULTI_CPU` becomes `use_cpu: true`, `FSDP` becomes
`use_fsdp: true` with its fsdp_config (from_accelerate_fsdp.py), `DEEPSPEED` becomes `use_deepspeed: true` with
its deepspeed_config; `parallelism_config` keeps its sizes
under the same keys (accel's settings); `MULTI_GPU` or `FSDP` on a machine
where torch sees no GPU is refused without `use_cpu: true` (it would otherwise quietly train on
CPUs). Keys that only mean something to Accelerate are dropped silently at their do-nothing values (debug: false, ...);
at any other value (distributed_type: XLA, enable_cpu_affinity: true, ...) the config is refused, naming
each key, before anything starts: running without what it asks for would be a different run (on GPUs, an
out-of-memory error instead of a refusal). The launcher's restart and rendezvous keys (max_restarts,
rdzv_backend, ...) are accel's own settings and pass through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accel.cli import capabilities
from accel.cli.config.from_accelerate_fsdp import hybrid_sizes, translate_fsdp
from accel.cli.errors import CliError, warn
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.parallel.config import SP_REASON
from accel.settings import (
    DEEPSPEED_SECTION,
    DEEPSPEED_SETTINGS_BY_KEY,
    DYNAMO_BACKEND,
    DYNAMO_SECTION,
    DYNAMO_SETTINGS_BY_KEY,
    FP8_SECTION,
    FP8_SETTINGS_BY_KEY,
    FSDP_SECTION,
    GRADIENT_ACCUMULATION_STEPS,
    PARALLELISM_SECTION,
    PARALLELISM_SETTINGS_BY_KEY,
    TOP_LEVEL_SETTINGS,
    USE_DEEPSPEED,
    USE_FSDP,
)

_MARKERS = frozenset({"distributed_type", "compute_environment", "main_training_function", "downcast_bf16"})
"""Top-level keys only Accelerate writes."""
_UPPER_CASE_BACKENDS = frozenset({"TE", "MSAMP", "AO"})

_INERT: dict[str, tuple[Any, ...]] = {
    "compute_environment": ("LOCAL_MACHINE",),
    "debug": (False,),
    "downcast_bf16": ("no", False),
    "enable_cpu_affinity": (False,),
    "main_training_function": ("main",),
    "same_network": (True,),
    "tpu_use_cluster": (False,),
    "tpu_use_sudo": (False,),
    "use_mps_device": (False,),
    "dynamo_backend": ("NO", "no"),
    "interval": (1,),
    "override_linear_precision": ([False, False, False],),
    "parallelism_config_cp_backend": ("torch",),
    "parallelism_config_sp_size": (1,),
    "parallelism_config_sp_backend": ("deepspeed",),
}
"""Accelerate keys that change nothing at these values, so dropping them loses nothing."""

_DISTRIBUTED_TYPES: dict[str, dict[str, Any]] = {
    "NO": {}, "MULTI_GPU": {}, "MULTI_CPU": {"use_cpu": True}, "FSDP": {USE_FSDP.name: True},
    "DEEPSPEED": {USE_DEEPSPEED.name: True},
}
"""distributed_type values accel runs, and the settings each implies (over the file's own, as in Accelerate)."""

_ACCEL_KEYS = frozenset(s.yaml_key for s in TOP_LEVEL_SETTINGS) | {FP8_SECTION, DYNAMO_SECTION}


def looks_like_accelerate(data: Mapping[Any, Any]) -> bool:
    """Whether `data` was written by Accelerate (its own top-level keys, or its FP8 spellings)."""
    if _MARKERS & set(data):
        return True
    recipe = data.get(FP8_SECTION)
    if not isinstance(recipe, dict):
        return False
    return recipe.get("backend") in _UPPER_CASE_BACKENDS or bool(set(FP8RecipeKwargs.aliases) & set(recipe))


def translate(
    data: Mapping[Any, Any], path: Path, command: str, gpus: Callable[[], int] | None = None
) -> dict[str, Any]:
    """accel's mapping for Accelerate's `data`; CliError naming every key it would have to drop that matters.

    `gpus` (how many GPUs torch sees; default capabilities.gpu_count) is called only for MULTI_GPU.
    """
    result: dict[str, Any] = {}
    dropped: list[str] = []
    implied: dict[str, Any] = {}
    for key, value in data.items():
        if key in (FSDP_SECTION, PARALLELISM_SECTION, DEEPSPEED_SECTION):
            continue  # translate_fsdp, _translate_parallelism and _translate_deepspeed read them
        if key in _ACCEL_KEYS:
            result[key] = value
        elif key == "distributed_type" and str(value).upper() in _DISTRIBUTED_TYPES:
            implied = _DISTRIBUTED_TYPES[str(value).upper()]
            _check_gpus_for(str(value).upper(), data, path, gpus)
        elif not _is_inert(key, value):
            dropped.append(_describe(str(key), value))
    result.update(implied)
    if isinstance(result.get(FP8_SECTION), dict):
        result[FP8_SECTION] = _translate_recipe(result[FP8_SECTION], dropped)
    _translate_dynamo(data, result, dropped)
    fsdp, fsdp_note = translate_fsdp(data, result.get(USE_FSDP.name) is True, dropped, path)
    if fsdp:
        result[FSDP_SECTION] = fsdp
    _translate_parallelism(data, result, dropped, path)
    _translate_deepspeed(data, result, dropped, path)
    if fsdp_note:
        warn(command, f"{path}: {fsdp_note}")
    if dropped:
        raise CliError(
            f"{path} is an Accelerate config that asks for what accel does not run, so nothing was started: "
            f"{', '.join(_with_hint(entry) for entry in dropped)}. Remove these keys (or set them to Accelerate's "
            "defaults) to run the script with accel; `accel config` writes a config of accel's own"
        )
    return result


_HINTS = {
    "distributed_type": "accel runs NO, MULTI_CPU, MULTI_GPU, FSDP and DEEPSPEED",
    "enable_cpu_affinity": "accel does not pin processes to CPU cores",
}
"""What to do instead, for the keys users meet most."""


def _with_hint(entry: str) -> str:
    """A refused key as named in the message, with what to do where there is a hint for it."""
    key = entry.split("=", 1)[0].split(".", 1)[0]
    return f"{entry} ({_HINTS[key]})" if key in _HINTS else entry


def _check_gpus_for(
    distributed_type: str, data: Mapping[Any, Any], path: Path, gpus: Callable[[], int] | None
) -> None:
    """Refuse MULTI_GPU or FSDP (without use_cpu: true) where there is no GPU, rather than start CPU processes."""
    if distributed_type not in ("MULTI_GPU", "FSDP") or data.get("use_cpu") is True:
        return
    if (gpus or capabilities.gpu_count)() > 0:
        return
    raise CliError(
        f"{path}: distributed_type: {distributed_type}, but torch sees no GPU on this machine, so the processes would "
        "train on the CPU. To train on the CPU say so: set "
        + ("`use_cpu: true`" if distributed_type == "FSDP" else "`distributed_type: MULTI_CPU` (or `use_cpu: true`)")
        + "; otherwise run where a GPU is visible (check CUDA_VISIBLE_DEVICES and `accel env`)"
    )


def _translate_recipe(recipe: Mapping[Any, Any], dropped: list[str]) -> dict[str, Any]:
    """Keep the recipe keys accel knows (in either spelling); record the Accelerate-only ones in `dropped`."""
    known = set(FP8_SETTINGS_BY_KEY) | set(FP8RecipeKwargs.aliases)
    kept: dict[str, Any] = {}
    for key, value in recipe.items():
        if key in known:
            kept[key] = value
        elif not _is_inert(key, value):
            dropped.append(_describe(f"{FP8_SECTION}.{key}", value))
    return kept


def _translate_dynamo(data: Mapping[Any, Any], result: dict[str, Any], dropped: list[str]) -> None:
    """Keep dynamo_config's keys accel knows; the older top-level dynamo_backend moves into it (as Accelerate)."""
    section = data.get(DYNAMO_SECTION)
    kept: dict[str, Any] = {}
    for key, value in (section.items() if isinstance(section, dict) else ()):
        if key in DYNAMO_SETTINGS_BY_KEY:
            kept[key] = value
        elif not _is_inert(key, value):
            dropped.append(_describe(f"{DYNAMO_SECTION}.{key}", value))
    legacy = data.get(DYNAMO_BACKEND.name)
    if legacy is not None and not _is_inert(DYNAMO_BACKEND.name, legacy):
        dropped.remove(_describe(DYNAMO_BACKEND.name, legacy))
        kept.setdefault(DYNAMO_BACKEND.name, legacy)
    if kept:
        result[DYNAMO_SECTION] = kept
    elif DYNAMO_SECTION in result:
        result[DYNAMO_SECTION] = None


_DEEPSPEED_LAUNCHER_KEYS: dict[str, tuple[Any, ...]] = {
    "deepspeed_multinode_launcher": ("standard",), "deepspeed_hostfile": (None, ""),
    "deepspeed_exclusion_filter": (None, ""), "deepspeed_inclusion_filter": (None, ""),
    "offload_optimizer_nvme_path": (None, "none", ""), "offload_param_nvme_path": (None, "none", ""),
}
"""deepspeed_config keys for DeepSpeed's own launcher (accel starts processes with torchrun) or NVMe offload, at the
values that ask for nothing."""


def _translate_deepspeed(data: Mapping[Any, Any], result: dict[str, Any], dropped: list[str], path: Path) -> None:
    """Keep deepspeed_config's keys accel knows (only with distributed_type: DEEPSPEED); its gradient_accumulation_steps
    becomes the top-level one (Accelerate's launcher hands it over so), refused when the two disagree."""
    section = data.get(DEEPSPEED_SECTION)
    section = section if isinstance(section, Mapping) else {}
    if section and result.get(USE_DEEPSPEED.name) is not True:
        dropped.append(f"{DEEPSPEED_SECTION} (distributed_type is not DEEPSPEED)")
        return
    kept: dict[str, Any] = {}
    for key, value in section.items():
        if key in DEEPSPEED_SETTINGS_BY_KEY:
            kept[key] = value
        elif key == GRADIENT_ACCUMULATION_STEPS.name:
            top = result.setdefault(key, value)
            if top != value:
                raise CliError(f"{path}: gradient_accumulation_steps: {top} and {DEEPSPEED_SECTION}.{key}: {value} "
                               "disagree; give one value")
        elif value not in _DEEPSPEED_LAUNCHER_KEYS.get(str(key), ()):
            dropped.append(_describe(f"{DEEPSPEED_SECTION}.{key}", value))
    if kept:
        result[DEEPSPEED_SECTION] = kept


def _translate_parallelism(data: Mapping[Any, Any], result: dict[str, Any], dropped: list[str], path: Path) -> None:
    """Keep parallelism_config's sizes (Accelerate's keys are accel's); an FSDP1 HYBRID_SHARD without one becomes its
    sizes (from_accelerate_fsdp.hybrid_sizes). Sequence parallelism in Accelerate's file is DeepSpeed's (its only
    sp_backend), which is refused; context parallelism's size goes on to the ordinary check, which refuses cp_size > 1
    with the reason before any process starts."""
    section = data.get(PARALLELISM_SECTION)
    kept: dict[str, Any] = {}
    items = dict(section.items()) if isinstance(section, Mapping) else {}
    sp_size, sp_backend = items.get("parallelism_config_sp_size"), items.get("parallelism_config_sp_backend") or "deepspeed"
    if sp_size not in (None, 1) and sp_backend == "deepspeed" and result.get(USE_DEEPSPEED.name) is not True:
        raise CliError(f"{path}: {PARALLELISM_SECTION}.parallelism_config_sp_size={sp_size} with sp_backend "
                       f"{sp_backend!r} (Accelerate's only one): {SP_REASON}.")
    for key, value in items.items():
        if key in PARALLELISM_SETTINGS_BY_KEY and not _is_inert(key, value):
            kept[key] = value
        elif key == "parallelism_config_sp_backend" and sp_size not in (None, 1):
            kept[key] = value
        elif not _is_inert(key, value) and not str(key).startswith(("parallelism_config_cp_", "parallelism_config_sp_")):
            dropped.append(_describe(f"{PARALLELISM_SECTION}.{key}", value))
    if not kept and result.get(USE_FSDP.name) is True:
        kept = hybrid_sizes(data) or {}
    if kept:
        result[PARALLELISM_SECTION] = kept


def _is_inert(key: object, value: Any) -> bool:
    """True for a key at a value that changes nothing (an empty section, or a known do-nothing value)."""
    if value is None or value == [] or value == {}:
        return True
    return isinstance(key, str) and value in _INERT.get(key, ())


def _describe(key: str, value: Any) -> str:
    return f"{key}={value}" if isinstance(value, (str, int, float, bool)) else key
