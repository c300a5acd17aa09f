"""The Accelerator's `prepare` and its per-kind `prepare_*` methods.

Each object is converted for the precision, spread over the processes by the strategy, and
recorded in `self.prepared` in the order given (the order checkpoints store them in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader

from accel._validation import check_bool
from accel.accelerator import options, prepare_checks
from accel.backends.base import PrecisionBackend
from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader import PreparedDataLoader
from accel.distributed.partial_state import AcceleratorState
from accel.distributed.process_state import ProcessState
from accel.kwargs_handlers.dynamo import TorchDynamoPlugin
from accel.monitoring import ThroughputMonitor
from accel.parallel.strategy import ParallelStrategy
from accel.quantization import Quantizer
from accel.training import compiling, meta_init
from accel.training import model as model_utils
from accel.training.blocks import checkpoint_blocks
from accel.training.gradient_state import GradientState
from accel.training.optimizer import AcceleratedOptimizer
from accel.training.prepared import PreparedObjects
from accel.training.scheduler import AcceleratedScheduler

if TYPE_CHECKING:
    from accel.parallel.context import ContextParallel
    from accel.parallel.sequence.ulysses import SequenceParallel

    class _Preparer(Protocol):
        """One of the prepare_* methods: the object, and its device_placement."""

        def __call__(self, obj: Any, /, device_placement: bool | None = None) -> Any: ...


class PrepareMixin:
    """prepare, prepare_model, prepare_optimizer, prepare_scheduler, prepare_data_loader."""

    precision: PrecisionBackend
    quantizer: Quantizer | None
    strategy: ParallelStrategy
    sequence_parallel: SequenceParallel | None
    context_parallel: ContextParallel | None
    activation_checkpointing_policy: str | float
    prepared: PreparedObjects
    process_state: ProcessState
    state: AcceleratorState
    gradient_state: GradientState
    dataloader_config: DataLoaderConfiguration
    dynamo_plugin: TorchDynamoPlugin
    activation_checkpointing: bool | tuple[str, ...]
    device_placement: bool
    step_scheduler_with_optimizer: bool
    scheduler_per_optimizer_step: bool
    _orphan_optimizers_warned: set[int]
    throughput_monitor: ThroughputMonitor | None

    def prepare(self, *objects: Any, device_placement: Sequence[bool] | None = None) -> Any:
        """Prepare models, optimizers, schedulers and dataloaders, given in any order.

        Each model is moved to the device, converted for the precision (FP8 layers, quantized layers,
        activation checkpointing) and wrapped by the strategy (DDP, FSDP2, tensor parallelism) and
        torch.compile when asked; each optimizer steps through the precision (loss scaling, skipped
        fp16 steps) and honours accumulation; each scheduler steps with its optimizer; each dataloader
        gives this process its batches, on the device. Objects of other types pass through unchanged.
        Everything prepared is recorded, in order, for `save_state`. Under DeepSpeed the model, its
        optimizer and scheduler are prepared together into one engine: pass them in one call.
        After `AcceleratorState._reset_state()` with no new Accelerator it raises AttributeError,
        naming the reset, as Accelerate's.

        Args:
            *objects: Models (`nn.Module`), optimizers, learning-rate schedulers and dataloaders, in
                any order and number.
            device_placement: One bool per object, overriding the Accelerator's `device_placement`
                for each; None: the Accelerator's for all.

        Returns:
            The prepared objects in the order given, as a tuple (one object: that object itself).

        Example:
            ```python
            accelerator = Accelerator(mixed_precision="bf16")
            model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
            ```
        """
        self.state.check_not_reset()
        placements = options.placements(device_placement, len(objects))
        if self.strategy.prepares_together:  # DeepSpeed: the model, optimizer and scheduler in one engine
            prepared_together = self.strategy.prepare_objects(self, objects, placements)
            return prepared_together[0] if len(prepared_together) == 1 else tuple(prepared_together)
        given_optimizers = [obj for obj in objects if isinstance(obj, torch.optim.Optimizer)]
        models = [obj for obj in objects if isinstance(obj, nn.Module)]
        self.precision.check_masters(models, [*given_optimizers, *(o.optimizer for o in self.prepared.optimizers)])
        result = list(objects)
        for accepts, prepare in self._preparers():
            for index, obj in enumerate(result):
                if accepts(obj):
                    result[index] = prepare(obj, device_placement=placements[index])
                    result[index]._is_accelerate_prepared = True  # Accelerate's mark, which other code reads
        prepared = self.prepared
        prepare_checks.check_quantized_optimizers(prepared.optimizers, self.quantizer)
        self.precision.after_prepare(prepared.models, prepared.optimizers)
        prepare_checks.check_orphan_optimizers(
            prepared.models, prepared.optimizers, self.precision, self._orphan_optimizers_warned
        )
        return result[0] if len(result) == 1 else tuple(result)

    def _preparers(self) -> list[tuple[Callable[[Any], bool], _Preparer]]:
        """(which objects, how to prepare them), in the order in which they must be prepared."""
        return [
            (lambda o: isinstance(o, nn.Module), self.prepare_model),
            (lambda o: isinstance(o, torch.optim.Optimizer), self.prepare_optimizer),
            (lambda o: isinstance(o, (LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)), self.prepare_scheduler),
            (lambda o: isinstance(o, DataLoader), self.prepare_data_loader),
        ]

    def prepare_model(self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False) -> nn.Module:
        """Move `model` to the device and convert it for the precision (and wrap it for DDP).

        A model prepared already is given back as it is.

        Args:
            model: The model to prepare.
            device_placement: Overrides the Accelerator's `device_placement` for this model; None: the
                Accelerator's.
            evaluation_mode: True prepares a model only run forward: converted and placed, not wrapped
                for DDP/FSDP2, without activation checkpointing, and not watched by the throughput
                monitor.

        Returns:
            The prepared model (a wrapper under DDP or torch.compile; `unwrap_model` gives yours back).
        """
        if any(model is prepared for prepared in self.prepared.models):
            return model
        if self.strategy.prepares_together and not evaluation_mode:
            return self.strategy.prepare_objects(self, [model], [device_placement])[0]
        place = self._placement(device_placement)
        names = self.strategy.parameter_names(model)  # before conversion, which may replace Parameters
        state = self.process_state
        # a model built on the meta device: sharded first under FSDP2 (each process allocates its shards), else given memory here
        deferred = not evaluation_mode and self.strategy.defers_materialization(model)
        if not deferred and meta_init.meta_state(model) != "real":
            meta_init.materialize(model, state.device)
        if not evaluation_mode:  # its trainable weights become the precision's masters (float32 for mixed)
            self.precision.check_masters([model], [o.optimizer for o in self.prepared.optimizers])
        model = model_utils.prepare_model(
            model, self.precision, state.device, place and not deferred, None if deferred else state, self.quantizer,
            keep_masters=not evaluation_mode,
        )
        if self.sequence_parallel is not None:  # attention over the sequence ranks, the whole sequence's loss
            self.sequence_parallel.prepare_model(model)
        if self.context_parallel is not None:  # self-attention causal by flag, as ring attention needs
            self.context_parallel.prepare_model(model)
        if not evaluation_mode:
            # before FSDP's units and compiling, as Accelerate
            checkpoint_blocks(model, self.activation_checkpointing, self.activation_checkpointing_policy)
            model = self.strategy.wrap_model(model, names, self.prepared.optimizers)
        model = compiling.compile_model(model, self.dynamo_plugin)  # last, over DDP, as Accelerate
        if self.throughput_monitor is not None and not evaluation_mode:
            self.throughput_monitor.watch_model(model)
        self.prepared.models.append(model)
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None) -> AcceleratedOptimizer:
        """Wrap `optimizer` so that it steps through the precision and honours accumulation.

        The same optimizer prepared twice (in one call or two) gets the same wrapper. Raises under
        DeepSpeed (its engine builds the model and optimizer together: use `prepare`).

        Args:
            optimizer: The optimizer to wrap.
            device_placement: Accepted for Accelerate's signature; the optimizer's state lives with
                its parameters, so there is nothing to move.

        Returns:
            An `AcceleratedOptimizer` sharing `param_groups` and `state` with `optimizer`.
        """
        if isinstance(optimizer, AcceleratedOptimizer):
            return optimizer
        if self.strategy.prepares_together:
            raise ValueError("prepare_optimizer under DeepSpeed: the engine builds the model and its optimizer "
                             "together; call accelerator.prepare(model, optimizer, ...) in one call.")
        existing = prepare_checks.existing_wrapper(self.prepared.optimizers, optimizer)
        if existing is not None:
            return existing
        self.precision.check_optimizer(optimizer)
        self.strategy.retarget_optimizer(optimizer, self.prepared.models)
        wrapped = AcceleratedOptimizer(optimizer, self.precision, self.gradient_state)
        if self.throughput_monitor is not None:
            self.throughput_monitor.watch_optimizer(wrapped.optimizer)
        self.prepared.optimizers.append(wrapped)
        return wrapped

    def prepare_scheduler(self, scheduler: LRScheduler, device_placement: bool | None = None) -> AcceleratedScheduler:
        """Wrap `scheduler` so that it steps as under Accelerate: once per process for each optimizer step that
        really happened (once under split_batches), or once per optimizer step with
        `Accelerator(scheduler_per_optimizer_step=True)` (accel/training/scheduler.py). A scheduler over an
        optimizer that was not prepared waits on all the prepared ones, as in Accelerate.

        Args:
            scheduler: The learning-rate scheduler (over a prepared optimizer, or the optimizer it wraps).
            device_placement: Accepted for symmetry: a scheduler has nothing to place.

        Returns:
            An `AcceleratedScheduler`.

        Example: `scheduler = accelerator.prepare_scheduler(LambdaLR(optimizer, lambda s: 1 - s / total))`.
        """
        owner = scheduler.optimizer
        matching = [o for o in self.prepared.optimizers if owner in (o, o.optimizer, o.original)]
        wrapped = AcceleratedScheduler.for_accelerator(
            scheduler,
            # as Accelerate: a scheduler over none of the prepared optimizers waits on all of them
            matching[:1] or self.prepared.optimizers,
            self.gradient_state,
            step_with_optimizer=self.step_scheduler_with_optimizer,
            num_processes=self.process_state.num_processes,
            split_batches=self.dataloader_config.split_batches,
            per_optimizer_step=self.scheduler_per_optimizer_step,
        )
        self.prepared.schedulers.append(wrapped)
        return wrapped

    def prepare_data_loader(
        self, data_loader: DataLoader[Any], device_placement: bool | None = None, slice_fn_for_dispatch: Any = None
    ) -> PreparedDataLoader:
        """Wrap `data_loader` so that its batches land on the device (and each process gets its own part).

        How the data is split follows the Accelerator's `dataloader_config` (`split_batches`,
        `even_batches`, ...). A loader prepared already is given back as it is.

        Args:
            data_loader: A torch `DataLoader`.
            device_placement: Overrides the Accelerator's `device_placement` for its batches; None:
                the Accelerator's.
            slice_fn_for_dispatch: With dispatched batches, how a process's part is cut from each batch
                (`slice_fn(batch, slice, process_index=..., num_processes=...)`, Accelerate's argument).

        Returns:
            A `PreparedDataLoader`.
        """
        if isinstance(data_loader, PreparedDataLoader):  # prepared already: given back (Accelerate's meaning)
            if not any(d is data_loader for d in self.prepared.dataloaders):
                self.prepared.dataloaders.append(data_loader)
            return data_loader
        place = self._placement(device_placement)
        wrapped = PreparedDataLoader(
            data_loader, self.process_state.device, self.gradient_state, place, self.process_state,
            config=self.dataloader_config, slice_fn=slice_fn_for_dispatch,
            batch_transform=None if self.sequence_parallel is None else self.sequence_parallel.shard_batch,
        )
        self.prepared.dataloaders.append(wrapped)
        return wrapped

    def _placement(self, device_placement: bool | None) -> bool:
        """Whether to move this object to the device: the call's choice, else the Accelerator's."""
        return self.device_placement if device_placement is None else check_bool("device_placement", device_placement)
