"""ParallelStrategy: how prepared models are spread over the processes, chosen once per Accelerator.

`ParallelStrategy` is the interface every strategy implements, with the defaults of a layout in which
every process holds the whole model and its optimizer state. `DataParallelStrategy` is that layout: one
process, or DistributedDataParallel over several. The others shard or split the model instead:
accel.fsdp.strategy.FSDPStrategy (FSDP2, HSDP), accel.parallel.tensor_strategy.TensorParallelStrategy
(TP, alone or with FSDP2: 2-D) and accel.deepspeed.strategy.DeepSpeedStrategy (DeepSpeed's engine).

Everything that differs between them goes through these methods: wrapping a model, pointing an
optimizer at the parameters it should step, skipping the gradient synchronisation of a micro-batch,
clipping, the full weights, and how checkpoints store models and optimizers (whole, or each process's
shards: the shard I/O of torch.distributed.checkpoint is accel.parallel.sharded_checkpoints', DeepSpeed's
is its strategy's). The Accelerator picks one in its constructor (accel.parallel.choice.create_strategy);
no other code asks which one runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from accel.backends.base import PrecisionBackend
from accel.distributed.process_state import ProcessState
from accel.kwargs_handlers import DistributedDataParallelKwargs, Handlers
from accel.parallel.sharded_checkpoints import ShardReadingMixin
from accel.training.model import wrap_for_processes

if TYPE_CHECKING:
    from pathlib import Path

    from accel.checkpointing.host import CheckpointHost
    from accel.checkpointing.manifest import Manifest
    from accel.training.gradient_state import GradientState
    from accel.training.optimizer import AcceleratedOptimizer


class ParallelStrategy:
    """The interface of every strategy, with the defaults of a whole model on every process.

    A strategy says how it places a model over the processes (`wrap_model`), or prepares a model
    with its optimizer and scheduler at once (`prepares_together`, `prepare_objects`); the rest has a
    default here: backward and clipping through the precision, the weights as the model holds them,
    optimizers left as they are. A strategy whose checkpoints hold shards says so with
    `sharded_checkpoints` and implements the shard methods (`write_shards`, `shard_problems`,
    `read_shards`, `apply_shards`); here they raise, as a whole model has no shards of its own.
    """

    name: ClassVar[str]
    """How the strategy is named in messages ("data_parallel", "fsdp", "tensor_parallel", "deepspeed")."""
    prepares_together: ClassVar[bool] = False
    """True when a model, its optimizer and scheduler must be prepared in one call (`prepare_objects`: DeepSpeed)."""
    shards_parameters: ClassVar[bool] = False
    """True when each process holds only shards of the parameters: optimizer states are then saved by
    parameter name, and the gradients of an accumulation window cannot be saved (no process has them whole)."""

    def __init__(self, process_state: ProcessState, precision: PrecisionBackend, handlers: Handlers) -> None:
        self.process_state = process_state
        self.precision = precision
        self.handlers = handlers

    @property
    def sharded_checkpoints(self) -> bool:
        """True when save_state writes each process's shards rather than full models and optimizers."""
        return False

    def checkpoint_record(self) -> dict[str, Any] | None:
        """The settings that shape a checkpoint, for its manifest (the `fsdp` field); None here."""
        return None

    # ----------------------------------------------------------------- prepare
    def parameter_names(self, model: nn.Module) -> dict[int, str]:
        """id(parameter) -> name, taken before the precision converts `model`; only a strategy that
        replaces parameters needs them (to point optimizers built earlier at the new ones)."""
        return {}

    def builds_on_meta(self) -> bool:
        """True when `accelerator.init_module()` builds this process's model on the meta device because
        another process's weights will fill it at prepare (FSDP2's cpu_ram_efficient_loading); False here."""
        return False

    def defers_materialization(self, model: nn.Module) -> bool:
        """True when `wrap_model` gives `model` its weights itself (sharded from the meta device), so that
        prepare must neither place it nor send process 0's weights first. False here: a model on the meta
        device is given memory and `reset_parameters()` before prepare places it."""
        return False

    def wrap_model(self, model: nn.Module, names: dict[int, str], optimizers: Sequence[AcceleratedOptimizer]) -> nn.Module:
        """`model` ready to train over the processes; `names` are `parameter_names(model)` and `optimizers`
        those prepared before it (to follow parameters the strategy replaces). Every strategy that prepares
        models one by one gives its own."""
        raise NotImplementedError(f"{type(self).__name__} does not prepare models one by one")

    def retarget_optimizer(self, optimizer: torch.optim.Optimizer, models: Sequence[nn.Module]) -> None:
        """Point `optimizer`, built before its model was prepared, at the parameters that train (they are the same here)."""

    def prepare_objects(self, accelerator: Any, objects: Sequence[Any], placements: Sequence[bool | None]) -> list[Any]:
        """Prepare everything of one `prepare` call at once (only where `prepares_together`)."""
        raise NotImplementedError(f"{type(self).__name__} prepares objects one by one")

    # ----------------------------------------------------------------- training step
    def backward(self, loss: torch.Tensor, gradient_state: GradientState, **kwargs: Any) -> None:
        """Backpropagate `loss` divided by the accumulation steps, through the precision (loss scaling)."""
        steps = gradient_state.num_steps
        self.precision.backward(loss / steps if steps > 1 else loss, **kwargs)

    def no_sync(self, model: nn.Module) -> AbstractContextManager[Any]:
        """Skip the gradient all-reduce inside the block: DDP's, for a model it wraps; nothing to skip otherwise."""
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip the gradients' total norm (the precision's way: FP8 gradients included); return the norm."""
        return self.precision.clip_grad_norm_(parameters, max_norm, norm_type)

    # ----------------------------------------------------------------- weights
    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The model's weights under their original names, in high precision (every process has them)."""
        return self.precision.model_state_dict(model)

    def weight_shapes(self, model: nn.Module) -> dict[str, tuple[int, ...]] | None:
        """The full shapes of the model's weights without gathering them, where gathering is needed
        to read them; None here (the weights are whole on every process)."""
        return None

    def load_full_weights(self, model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
        """Copy full weights into `model` (names checked before); tied weights saved once fill every name."""
        model.load_state_dict(weights, strict=False)

    # ----------------------------------------------------------------- sharded checkpoints (sharded_checkpoints)
    def write_shards(self, accelerator: CheckpointHost, folder: Path) -> dict[str, int]:
        """Every process writes its shards into `folder/shards`; returns the files it wrote and their sizes."""
        raise NotImplementedError(f"{type(self).__name__} writes no shards")

    def shard_problems(
        self, accelerator: CheckpointHost, folder: Path, manifest: Manifest, models: list[int], label: str
    ) -> list[str]:
        """What keeps a sharded checkpoint's shards from loading here (raises for unreadable files)."""
        raise NotImplementedError(f"{type(self).__name__} reads no shards")

    def read_shards(self, accelerator: CheckpointHost, folder: Path, models: list[int], label: str) -> dict[str, Any]:
        """This process's shards, read (collectively) before anything is changed."""
        raise NotImplementedError(f"{type(self).__name__} reads no shards")

    def apply_shards(self, accelerator: CheckpointHost, state: dict[str, Any], models: list[int]) -> None:
        """Put what `read_shards` read into the models and optimizers."""
        raise NotImplementedError(f"{type(self).__name__} reads no shards")


class DataParallelStrategy(ShardReadingMixin, ParallelStrategy):
    """Data parallelism: one process, or DDP with a full copy of the model on every process.

    Its checkpoints hold whole models and optimizers; it loads sharded ones too (the shards of an FSDP2
    or tensor-parallel run, gathered into whole models: ShardReadingMixin), but writes none.

    >>> from accel.kwargs_handlers import collect_handlers
    >>> from accel.backends.full import FullPrecision
    >>> state = ProcessState(device=torch.device("cpu"))
    >>> handlers = collect_handlers(None, None)
    >>> strategy = DataParallelStrategy(state, FullPrecision(state.device, handlers), handlers)
    >>> strategy.shards_parameters, strategy.sharded_checkpoints
    (False, False)
    """

    name: ClassVar[str] = "data_parallel"

    def wrap_model(self, model: nn.Module, names: dict[int, str], optimizers: Sequence[AcceleratedOptimizer]) -> nn.Module:
        """`model` ready to train over the processes (DDP when there are several; `names` and
        `optimizers` are unused here, as DDP keeps the parameters)."""
        return wrap_for_processes(model, self.process_state, self.handlers.get(DistributedDataParallelKwargs))
