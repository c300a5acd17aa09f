"""The Accelerator's constructor options: each keyword against its `ACCEL_*` variable (`setting`),
and the options from Accelerate that have none: dataloader_config (and the older
split_batches/even_batches), the gradient accumulation plugin and rng_types (dynamo_backend: compiling.py).
Each raises at construction, naming the argument, the value and what to do."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from accel._validation import check_bool, check_int
from accel.backends.base import PrecisionBackend
from accel.backends.registry import create_backend
from accel.data.configuration import DataLoaderConfiguration
from accel.fsdp import environment as fsdp_environment
from accel.kwargs_handlers import BitsandbytesKwargs, FP8RecipeKwargs, Handlers
from accel.settings import ACTIVATION_CHECKPOINTING_POLICY, SCHEDULER_PER_OPTIMIZER_STEP, Setting
from accel.settings.handlers import bnb_options_from_env, fp8_recipe_from_env
from accel.training.accumulation import GradientAccumulationPlugin

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

RNG_TYPES = ("torch", "cuda", "mps", "npu", "xla", "xpu", "hpu", "mlu", "sdaa", "musa", "generator")
"""The names Accelerate accepts in `rng_types`."""


def dataloader_config(
    config: DataLoaderConfiguration | None, split_batches: bool | None, even_batches: bool | None
) -> DataLoaderConfiguration:
    """The dataloader configuration: `dataloader_config`, or one built from the older keywords."""
    older = {name: value for name, value in (("split_batches", split_batches), ("even_batches", even_batches))
             if value is not None}
    if config is not None and older:
        raise ValueError(
            f"Accelerator got dataloader_config and {', '.join(f'{k}={v!r}' for k, v in older.items())}: give these "
            "fields in the DataLoaderConfiguration only (DataLoaderConfiguration(split_batches=..., even_batches=...))."
        )
    if config is None:
        return DataLoaderConfiguration(**older)
    if not isinstance(config, DataLoaderConfiguration):
        raise TypeError(
            f"Accelerator(dataloader_config={config!r}): give a DataLoaderConfiguration (from accel.utils import "
            "DataLoaderConfiguration)."
        )
    return config


def accumulation_plugin(
    plugin: GradientAccumulationPlugin | None, steps: int | None
) -> GradientAccumulationPlugin | None:
    """The plugin, checked: not with `gradient_accumulation_steps`, and only options accel honours."""
    if plugin is None:
        return None
    if not isinstance(plugin, GradientAccumulationPlugin):
        raise TypeError(
            f"Accelerator(gradient_accumulation_plugin={plugin!r}): give a GradientAccumulationPlugin "
            "(from accel.utils import GradientAccumulationPlugin)."
        )
    if steps is not None:
        raise ValueError(
            f"Accelerator got gradient_accumulation_steps={steps!r} and gradient_accumulation_plugin: give the number "
            "of steps in one place only, GradientAccumulationPlugin(num_steps=...) or gradient_accumulation_steps=."
        )
    return plugin


def scheduler_per_optimizer_step(per_optimizer_step: bool, step_with_optimizer: bool) -> bool:
    """`scheduler_per_optimizer_step`, checked against `step_scheduler_with_optimizer=False` (a scheduler that
    steps on every call counts calls, not optimizer steps: the two cannot both hold)."""
    if per_optimizer_step and not step_with_optimizer:
        raise ValueError(
            "Accelerator got scheduler_per_optimizer_step=True and step_scheduler_with_optimizer=False: the first "
            "steps a prepared scheduler once per optimizer step, the second on every call. Keep one of them "
            f"({SCHEDULER_PER_OPTIMIZER_STEP.env_var} and accel launch {SCHEDULER_PER_OPTIMIZER_STEP.flags[0]} also set "
            "the first)."
        )
    return per_optimizer_step


def rng_types(value: Sequence[str] | None) -> list[str]:
    """Accelerate's `rng_types`, checked. accel needs none: each epoch's shuffling is drawn on
    process 0 and shared (see sharding.py), which is what synchronising these RNGs is for."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value)
    unknown = [name for name in names if str(getattr(name, "value", name)) not in RNG_TYPES]
    if unknown:
        raise ValueError(f"Accelerator(rng_types={value!r}): unknown {unknown}; accepted names: {', '.join(RNG_TYPES)}.")
    return [str(getattr(name, "value", name)) for name in names]


def forced_cpu(cpu: Any) -> bool | None:
    """The `cpu` keyword as a setting: True forces the CPU; False leaves the environment's choice,
    as in Accelerate, whose examples pass `cpu=args.cpu` (False unless asked), which must not undo
    `accel launch --cpu`."""
    if cpu is None:
        return None
    return True if check_bool("cpu", cpu) else None


def placements(value: Sequence[bool] | None, count: int) -> list[bool | None]:
    """`prepare(..., device_placement=[...])`: one bool per object, or None for each."""
    if value is None:
        return [None] * count
    if len(value) != count or not all(isinstance(v, bool) for v in value):
        raise ValueError(
            f"prepare(device_placement={value!r}): give one True/False per object passed to prepare ({count} here)."
        )
    return list(value)


def steps_from(plugin: GradientAccumulationPlugin | None) -> int | None:
    """The accumulation steps a plugin sets (None: take them from the environment or the default)."""
    return None if plugin is None or plugin.num_steps is None else check_int("num_steps", plugin.num_steps, minimum=1)


def with_environment_recipe(handlers: Handlers) -> Handlers:
    """Add the FP8 recipe and the bitsandbytes options that `accel launch` passed as ACCEL_FP8_* and
    ACCEL_BNB_* variables, if any.

    A handler given in the code wins; when it differs from the environment's, a warning says so.
    """
    recipe = fp8_recipe_from_env()
    quantization = bnb_options_from_env()
    from_environment = ((FP8RecipeKwargs, recipe, "ACCEL_FP8_*"), (BitsandbytesKwargs, quantization, "ACCEL_BNB_*"))
    for kind, from_env, variables in from_environment:
        if from_env is not None and handlers.has(kind) and handlers.get(kind) != from_env:
            warnings.warn(
                f"the {kind.__name__} given in the code overrides the one from {variables} variables ({from_env}).",
                UserWarning,
                stacklevel=3,
            )
    return handlers.with_environment(recipe, quantization)


def positive_int(argument: str, value: Any) -> int:
    return check_int(argument, value, minimum=1)


def setting(setting: Setting, value: Any, check: Callable[[str, Any], Any]) -> Any:
    """The keyword's value when given (checked), else the environment's (ACCEL_<NAME>, or the variable
    `accelerate launch` sets: Setting.lookup), else the default.

    A keyword that contradicts the environment (say `accel launch --mixed_precision fp16` for a
    script that passes mixed_precision='bf16') wins, with a warning naming both, as the keyword wins
    in Accelerate.
    """
    found = setting.lookup()
    if value is None:
        return setting.default if found is None else found[1]
    checked = check(setting.keyword, value)
    if found is not None and found[1] != checked:
        warnings.warn(
            f"{setting.keyword}={value!r} given in the code overrides "
            f"{found[0]}={os.environ[found[0]]!r} "
            "(from accel launch, accelerate launch or your environment).",
            UserWarning,
            stacklevel=3,
        )
    return checked


def check_same_setup(accelerator: Any) -> None:
    """Check the DDP options against the process group's backend, then compare this process's
    configuration with the others' (one small all-gather); raise if any differs, naming the setting
    and the processes (see distributed.check_same_setup)."""
    from accel.distributed import process_group as distributed
    from accel.kwargs_handlers import DistributedDataParallelKwargs

    if not accelerator.process_state.distributed:
        return
    handlers = accelerator.handlers
    handlers.get(DistributedDataParallelKwargs).check_backend(accelerator.process_state.backend)
    recipes = {kind.__name__: handlers.get(kind) for kind in accelerator.precision.handler_types}
    if accelerator.quantizer is not None:
        recipes["BitsandbytesKwargs"] = accelerator.quantizer.options
    distributed.check_same_setup(
        distributed.setup_fingerprint(
            mixed_precision=accelerator.mixed_precision,
            gradient_accumulation_steps=accelerator.gradient_accumulation_steps,
            device_type=accelerator.device.type,
            backend=accelerator.process_state.backend,
            ddp=handlers.get(DistributedDataParallelKwargs),
            **recipes,
        )
    )


def fsdp_plugin(plugin: Any, precision: PrecisionBackend, quantizer: Any) -> Any:
    """The FSDP plugin, checked against the precision (whose backend gets ready for FSDP, or refuses, in
    `configure_fsdp`) and quantization; None without one. Without one in the code, `accel launch
    --use_fsdp` describes it (accel/fsdp/environment.py)."""
    plugin = fsdp_environment.with_environment_plugin(plugin)
    if plugin is None:
        return None
    from accel.fsdp import FullyShardedDataParallelPlugin, mixed_precision_policy

    if not isinstance(plugin, FullyShardedDataParallelPlugin):
        raise TypeError(
            f"Accelerator(fsdp_plugin={plugin!r}): give a FullyShardedDataParallelPlugin "
            "(from accel.utils import FullyShardedDataParallelPlugin)."
        )
    if quantizer is not None:
        quantizer.check_sharding(bool(plugin.cpu_ram_efficient_loading))
    precision.configure_fsdp()
    # the plugin's __post_init__ made a dict of fields a MixedPrecisionPolicy
    mixed_precision_policy(precision.fsdp_precision, cast("MixedPrecisionPolicy | None", plugin.mixed_precision_policy))
    return plugin


def precision_backend(
    name: str, device: Any, handlers: Handlers, deepspeed: Any, parallelism: Any, dynamo_backend: str | None
) -> PrecisionBackend:
    """The precision's backend; under DeepSpeed the one naming what its engine runs (checked against its JSON,
    refusing what cannot run inside the engine: accel.deepspeed.options.backend)."""
    if deepspeed is None:
        return create_backend(name, device, handlers)
    from accel.deepspeed.options import backend

    return backend(deepspeed, name, device, handlers, quantized=handlers.has(BitsandbytesKwargs),
                   parallelism=parallelism, dynamo_backend=dynamo_backend)


def checkpoint_policy(value: Any, blocks: bool | tuple[str, ...], fsdp_checkpoints: bool = False) -> str | float:
    """`activation_checkpointing_policy` (keyword, else ACCEL_ACTIVATION_CHECKPOINTING_POLICY, else "full"), refused
    where it would change nothing or be undone: another policy than "full" without `activation_checkpointing` to
    apply it to, and a memory budget beside FSDP's `fsdp_activation_checkpointing` (`fsdp_checkpoints`), which
    checkpoints every unit the budget leaves unchecked."""
    policy = setting(ACTIVATION_CHECKPOINTING_POLICY, value, lambda arg, v: ACTIVATION_CHECKPOINTING_POLICY.check(v, arg))
    if policy != "full" and blocks is False:
        raise ValueError(
            f"activation_checkpointing_policy={policy!r} says how checkpointed blocks recompute, and "
            "activation_checkpointing is off, so it would change nothing. Give activation_checkpointing=True (or the "
            "blocks' class names) as well (FSDP's fsdp_activation_checkpointing always checkpoints fully)."
        )
    if not isinstance(policy, str) and fsdp_checkpoints:
        raise ValueError(
            f"activation_checkpointing_policy={policy!r} leaves that fraction of the blocks unchecked, and the FSDP "
            "plugin's activation_checkpointing (fsdp_activation_checkpointing) checkpoints every unit, which would undo "
            "it. Turn the plugin's off: Accelerator(activation_checkpointing=...) does the checkpointing, FSDP2 or not."
        )
    return policy
