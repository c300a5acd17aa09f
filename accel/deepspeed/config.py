"""The DeepSpeed config that `deepspeed.initialize` gets: the plugin's, with its "auto" values filled from the
Accelerator (precision, accumulation), the dataloaders (micro-batch) and the model (bucket sizes).

Contradictions are refused, naming both values: at construction those between the config and the
Accelerator (accumulation, precision); at prepare those with the prepared objects (an optimizer or
scheduler both in the JSON and in the script without DummyOptim/DummyScheduler).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from typing import Any

import torch

from accel.backends.deepspeed import DeepSpeedPrecision
from accel.deepspeed.dummies import DummyOptim, DummyScheduler
from accel.deepspeed.plugin import AUTO, DeepSpeedPlugin


def accumulation_steps(plugin: DeepSpeedPlugin, accelerator_steps: int | None) -> int | None:
    """The steps both agree on: the plugin's, the Accelerator's (None: not given), or ValueError naming both."""
    ours = plugin.gradient_accumulation_steps
    if ours == AUTO or ours is None:
        return accelerator_steps
    if accelerator_steps is not None and accelerator_steps != ours:
        raise ValueError(
            f"the DeepSpeed config has gradient_accumulation_steps={ours} and the Accelerator "
            f"gradient_accumulation_steps={accelerator_steps}: give the number in one place (or the same in both)."
        )
    return int(ours)


def precision_name(plugin: DeepSpeedPlugin, given: str | None) -> str | None:
    """The precision the DeepSpeed config enables when the Accelerator was given none, else `given`."""
    enabled = [key for key in ("fp16", "bf16") if isinstance(plugin.deepspeed_config.get(key), dict)
               and plugin.deepspeed_config[key].get("enabled") not in (False, AUTO, None)]
    if given is None and len(enabled) == 1:
        return enabled[0]
    return given


SEQUENTIAL_GATHER = "stage3_allgather_sequential"


def gather_one_at_a_time_on_gloo(plugin: DeepSpeedPlugin, device: torch.device) -> None:
    """On the CPU (gloo), ZeRO 3 gathers each parameter with its own blocking all-gather.

    DeepSpeed 0.19's coalesced gather (`_allgather_params_coalesced`: GatheredParameters over several
    parameters, the 16-bit state dict, transformers' zero.Init loading) starts one asynchronous
    all-gather per parameter and waits for the last one only. On NCCL that implies the others (one
    stream); gloo runs them on several threads, so the others can still be in flight and the gathered
    weights hold uninitialised memory. Measured on 2 gloo processes: 174 of 200 gathers of a 6-layer
    model differed from the first, and ZeRO 3 training reached inf/NaN within 60 steps where ZeRO 2
    trained; with `stage3_allgather_sequential` (DeepSpeed's own option) 0 of 200, and the same losses
    in every run. A config that sets it otherwise on the CPU is refused (it would train on garbage).
    """
    if device.type != "cpu" or plugin.zero_stage != 3:
        return
    zero = plugin.deepspeed_config["zero_optimization"]
    given = zero.get(SEQUENTIAL_GATHER, AUTO)
    if given is not True and given != AUTO:
        shown = json.dumps(given, default=repr)
        raise ValueError(
            f"the DeepSpeed config sets zero_optimization.{SEQUENTIAL_GATHER}={shown} on the CPU: DeepSpeed's "
            "coalesced ZeRO-3 gather waits only for the last of its gloo all-gathers and reads the others "
            "unfinished (uninitialised weights, docs/deepspeed.md). Remove the key, or set it true or \"auto\"; "
            "accel sets it true on the CPU."
        )
    zero[SEQUENTIAL_GATHER] = True


def check_precision(plugin: DeepSpeedPlugin, precision: DeepSpeedPrecision) -> None:
    """Refuse a DeepSpeed config whose precision sections contradict the Accelerator's precision."""
    problem = precision.config_disagreement(plugin.deepspeed_config)
    if problem:
        raise ValueError(f"{problem}: make them agree (or set the JSON's \"enabled\" to \"auto\").")


def check_objects(plugin: DeepSpeedPlugin, optimizer: Any, scheduler: Any) -> None:
    """Accelerate's rules for the optimizer and scheduler given to prepare against the JSON's."""
    config = plugin.deepspeed_config
    if optimizer is not None and ("optimizer" in config) != isinstance(optimizer, DummyOptim):
        if isinstance(optimizer, DummyOptim):
            raise ValueError("prepare got a DummyOptim, but the DeepSpeed config has no \"optimizer\" section to build "
                             "the optimizer from: add one, or prepare a torch optimizer.")
        raise ValueError(
            f"the DeepSpeed config has an optimizer ({config['optimizer'].get('type')!r}) and the script prepared "
            f"{type(optimizer).__name__}: remove the JSON's \"optimizer\", or prepare accel.utils.DummyOptim instead."
        )
    if scheduler is None:
        return
    dummy = isinstance(scheduler, DummyScheduler)
    if "scheduler" in config and not dummy:
        raise ValueError(
            f"the DeepSpeed config has a scheduler ({config['scheduler'].get('type')!r}) and the script prepared "
            f"{type(scheduler).__name__}: remove the JSON's \"scheduler\", or prepare accel.utils.DummyScheduler."
        )
    if dummy and "scheduler" not in config and scheduler.lr_scheduler_callable is None:
        raise ValueError("prepare got a DummyScheduler without lr_scheduler_callable, and the DeepSpeed config has no "
                         "\"scheduler\" section: add one, or give DummyScheduler(lr_scheduler_callable=...).")
    if isinstance(optimizer, DummyOptim) != dummy and dummy:
        raise ValueError("a DummyScheduler needs a DummyOptim (the engine builds both): prepare a DummyOptim too.")


def micro_batch(plugin: DeepSpeedPlugin, batch_sizes: Sequence[int | None], num_processes: int, split: bool) -> int:
    """train_micro_batch_size_per_gpu: the config's, else from the prepared dataloaders (as Accelerate)."""
    if not plugin.is_auto("train_micro_batch_size_per_gpu"):
        return int(plugin.get_value("train_micro_batch_size_per_gpu"))
    if not batch_sizes or any(size is None for size in batch_sizes):
        raise ValueError(
            "under DeepSpeed, prepare needs the dataloaders in the same call as the model (with an integer "
            "batch_size), or train_micro_batch_size_per_gpu set in the DeepSpeed config: DeepSpeed's config needs it."
        )
    sizes = [int(size) // num_processes if split else int(size) for size in batch_sizes if size is not None]
    return min(sizes) if plugin.is_train_batch_min else max(sizes)


def build(
    plugin: DeepSpeedPlugin, precision: DeepSpeedPrecision, *, steps: int, micro: int, num_processes: int,
    model: torch.nn.Module, optimizer: Any, scheduler: Any, split_batches: bool,
) -> dict[str, Any]:
    """The config for `deepspeed.initialize` (a copy: the plugin's own keeps its "auto" values)."""
    config = copy.deepcopy(plugin.deepspeed_config)
    for key, section in precision.config_sections().items():  # the JSON's own options (loss scaling) kept
        given = config.get(key)
        config[key] = {**(given if isinstance(given, dict) else {}), **section}
    config["gradient_accumulation_steps"] = steps
    config["train_micro_batch_size_per_gpu"] = micro
    config["train_batch_size"] = micro * steps * num_processes
    if config.get("gradient_clipping") in (AUTO, None):
        config["gradient_clipping"] = 0.0  # never DeepSpeed's (nor Accelerate's) silent 1.0
    config.setdefault("steps_per_print", 2**31 - 1)  # DeepSpeed's own progress lines: off unless asked
    zero = config["zero_optimization"]
    if isinstance(optimizer, torch.optim.Optimizer):
        config["zero_allow_untested_optimizer"] = True
        if zero.get("offload_optimizer", {}).get("device", "none") != "none":
            config.setdefault("zero_force_ds_cpu_optimizer", False)  # the script's optimizer runs on the CPU copy
    _fill_hidden_size(zero, model)
    if isinstance(optimizer, DummyOptim):
        params = config["optimizer"].setdefault("params", {})
        _fill(params, "lr", optimizer.lr)
        _fill(params, "weight_decay", optimizer.weight_decay)
    if isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable is None:
        params = config["scheduler"].setdefault("params", {})
        _fill(params, "warmup_min_lr", 0)
        _fill(params, "warmup_max_lr", getattr(scheduler.optimizer, "lr", None))
        _fill(params, "warmup_num_steps", max(1, scheduler.warmup_num_steps))
        if scheduler.total_num_steps is not None:
            total = scheduler.total_num_steps
            _fill(params, "total_num_steps", total if split_batches else math.ceil(total / num_processes))
    left = _auto_keys(config)
    if left:
        raise ValueError(f"the DeepSpeed config still has \"auto\" at {', '.join(left)}, which accel cannot fill "
                         "from the Accelerator or the prepared objects: give values there.")
    return config


def _fill(params: dict[str, Any], key: str, value: Any) -> None:
    if params.get(key, AUTO) == AUTO:
        params[key] = value


def _fill_hidden_size(zero: dict[str, Any], model: torch.nn.Module) -> None:
    """Accelerate's bucket sizes from `model.config.hidden_size` for the ZeRO keys left "auto"."""
    keys = {"reduce_bucket_size": lambda h: h * h, "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
            "stage3_param_persistence_threshold": lambda h: 10 * h}
    auto = [key for key in keys if zero.get(key) == AUTO]
    if not auto:
        return
    config = getattr(model, "config", None)
    hidden = getattr(config, "hidden_size", None) or max(getattr(config, "hidden_sizes", None) or [0]) or None
    if hidden is None:
        raise ValueError(f"the DeepSpeed config has \"auto\" at zero_optimization.{', '.join(auto)}, filled from "
                         "model.config.hidden_size, which this model lacks: give integer values there.")
    for key in auto:
        zero[key] = keys[key](int(hidden))


def _auto_keys(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [hit for key, value in node.items() for hit in _auto_keys(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if node == AUTO else []
