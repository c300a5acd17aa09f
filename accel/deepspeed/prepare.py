"""One `prepare` call under DeepSpeed: dataloaders as everywhere (their batch size is the engine's micro-batch),
then the model, optimizer and scheduler through `deepspeed.initialize` (Accelerate's `_prepare_deepspeed`).

The prepared model is the engine; the optimizer a DeepSpeedOptimizerWrapper around DeepSpeed's; a torch
scheduler is wrapped as everywhere (it drives the learning rate of the optimizer DeepSpeed wraps), a scheduler
DeepSpeed built (from the JSON or DummyScheduler's callable) a DeepSpeedSchedulerWrapper.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.utils.data import DataLoader

from accel.deepspeed import config as ds_config
from accel.deepspeed import ulysses
from accel.deepspeed.dummies import DummyOptim, DummyScheduler
from accel.deepspeed.engine import DeepSpeedEngineWrapper, DeepSpeedOptimizerWrapper, DeepSpeedSchedulerWrapper
from accel.training.blocks import checkpoint_blocks

if TYPE_CHECKING:
    from accel.deepspeed.strategy import DeepSpeedStrategy

_OPTIMIZERS = (torch.optim.Optimizer, DummyOptim)
_SCHEDULERS = (LRScheduler, ReduceLROnPlateau, DummyScheduler)


def prepare_objects(
    strategy: DeepSpeedStrategy, accelerator: Any, objects: Sequence[Any], placements: Sequence[bool | None]
) -> list[Any]:
    """`accelerator.prepare(*objects)` under DeepSpeed (objects in any order; others pass through)."""
    result = list(objects)
    for index, obj in enumerate(result):
        if isinstance(obj, DataLoader):
            result[index] = accelerator.prepare_data_loader(obj, device_placement=placements[index])
    models = [i for i, obj in enumerate(objects) if isinstance(obj, nn.Module)]
    optimizers = [i for i, obj in enumerate(objects) if isinstance(obj, _OPTIMIZERS)]
    schedulers = [i for i, obj in enumerate(objects) if isinstance(obj, _SCHEDULERS)]
    _check_counts(strategy, models, optimizers, schedulers, accelerator.prepared.models)
    if not models:
        return _marked(result)
    model = objects[models[0]]
    optimizer = objects[optimizers[0]] if optimizers else None
    scheduler = objects[schedulers[0]] if schedulers else None
    ds_config.check_objects(strategy.plugin, optimizer, scheduler)
    sizes = [_batch_size(obj) for obj in objects if isinstance(obj, DataLoader)]
    state = accelerator.process_state
    config = ds_config.build(
        strategy.plugin, strategy.precision, steps=accelerator.gradient_accumulation_steps,
        micro=ds_config.micro_batch(strategy.plugin, sizes, state.num_processes, accelerator.split_batches),
        num_processes=state.num_processes, model=model, optimizer=optimizer, scheduler=scheduler,
        split_batches=accelerator.split_batches,
    )
    checkpoint_blocks(model, accelerator.activation_checkpointing, accelerator.activation_checkpointing_policy)
    parallelism = accelerator.parallelism_config
    if parallelism is not None and parallelism.deepspeed_ulysses:  # DeepSpeed's Ulysses: its groups, its loaders
        strategy.mpu = ulysses.register(model, parallelism, config["train_micro_batch_size_per_gpu"])
        config["train_batch_size"] //= parallelism.sizes["sp"]  # each sequence is split, not replicated
        for index, obj in enumerate(result):
            if isinstance(obj, DataLoader):
                result[index] = ulysses.adapt_loader(obj, strategy.mpu, state.device)
    engine, ds_optimizer, ds_scheduler = _initialize(model, optimizer, scheduler, config, state.device, strategy.mpu)
    strategy.config = config
    result[models[0]] = engine
    accelerator.prepared.models.append(engine)
    wrapped: list[DeepSpeedOptimizerWrapper] = []
    if optimizers:
        wrapped = [DeepSpeedOptimizerWrapper(ds_optimizer, optimizer, accelerator.precision, accelerator.gradient_state)]
        accelerator.prepared.optimizers.append(wrapped[0])
        result[optimizers[0]] = wrapped[0]
    strategy.engine = DeepSpeedEngineWrapper(engine, wrapped)
    if schedulers:
        if ds_scheduler is not None:
            prepared = DeepSpeedSchedulerWrapper(ds_scheduler, wrapped)
            accelerator.prepared.schedulers.append(prepared)
        else:
            prepared = accelerator.prepare_scheduler(scheduler)
        result[schedulers[0]] = prepared
    return _marked(result)


def _check_counts(
    strategy: DeepSpeedStrategy, models: list[int], optimizers: list[int], schedulers: list[int], prepared: list[Any]
) -> None:
    """One engine per Accelerator (until free_memory forgets it), built from one prepare call holding its model (and
    optimizer, scheduler)."""
    if len(models) > 1 or len(optimizers) > 1 or len(schedulers) > 1:
        raise ValueError(
            f"prepare under DeepSpeed got {len(models)} models, {len(optimizers)} optimizers and {len(schedulers)} "
            "schedulers: one engine runs one model with one optimizer and scheduler. Prepare one of each."
        )
    if models and strategy.engine is not None and any(model is strategy.engine.engine for model in prepared):
        raise ValueError("prepare under DeepSpeed got a second model: one Accelerator runs one DeepSpeed engine. "
                         "Put the models in one nn.Module, or use a second Accelerator.")
    if not models and (optimizers or schedulers):
        raise ValueError("prepare under DeepSpeed got an optimizer or scheduler without its model: DeepSpeed builds "
                         "them together, so prepare them in the same call as the model.")


def _single_process_group(device: torch.device) -> None:
    """DeepSpeed's engine needs a process group even in one process: a group of one, in this process's memory
    (accel runs one process without a group; DeepSpeed's own start-up would look for MPI), and LOCAL_RANK."""
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("LOCAL_RANK", "0")  # DeepSpeed's engine asserts a launcher set it
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def _initialize(
    model: nn.Module, optimizer: Any, scheduler: Any, config: dict[str, Any], device: torch.device, mpu: Any = None
) -> tuple[Any, Any, Any]:
    """deepspeed.initialize with the script's objects (a DummyOptim gives its parameters, a DummyScheduler its
    callable; `mpu`: DeepSpeed's Ulysses groups); returns (engine, DeepSpeed's optimizer, DeepSpeed's scheduler or None)."""
    import deepspeed

    _single_process_group(device)
    kwargs: dict[str, Any] = {"model": model, "config": config, "dist_init_required": False}
    if mpu is not None:
        kwargs["mpu"] = mpu
    if isinstance(optimizer, DummyOptim):
        kwargs["model_parameters"] = optimizer.params
        if isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable is not None:
            kwargs["lr_scheduler"] = scheduler.lr_scheduler_callable
    elif optimizer is not None:
        kwargs["optimizer"] = optimizer
    engine, ds_optimizer, _, ds_scheduler = deepspeed.initialize(**kwargs)
    return engine, ds_optimizer, ds_scheduler


def _batch_size(loader: DataLoader[Any]) -> int | None:
    if loader.batch_size is not None:
        return loader.batch_size
    return getattr(loader.batch_sampler, "batch_size", None)


def _marked(result: list[Any]) -> list[Any]:
    for obj in result:
        if isinstance(obj, (nn.Module, torch.optim.Optimizer, DataLoader)) or hasattr(obj, "scheduler"):
            obj._is_accelerate_prepared = True  # Accelerate's mark, which other code reads
    return result
