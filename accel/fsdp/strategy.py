"""FSDPStrategy: prepared models sharded with FSDP2 (accel.fsdp) instead of wrapped in DDP.

Each process holds shards of every parameter, gradient and optimizer state. Optimizers built
before sharding are pointed at the sharded parameters (by name, taken before the precision's
conversion); the gradients of a micro-batch that accumulates are not reduce-scattered; the norm
for clipping and the full weights are gathered over all shards; checkpoints store each process's
shards (SHARDED_STATE_DICT, through accel.parallel.sharded_checkpoints.ShardedCheckpointsMixin) or the gathered
whole (FULL_STATE_DICT), and optimizer states by name. The interface is accel.parallel.strategy.ParallelStrategy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

from accel.backends.base import PrecisionBackend
from accel.distributed.process_state import ProcessState
from accel.fsdp import meta_loading
from accel.fsdp.optimizer import parameter_names, retarget_optimizer
from accel.fsdp.plugin import FullyShardedDataParallelPlugin
from accel.fsdp.sharded_model import clip_grad_norm_, full_state_dict, gather_when_saved, is_sharded, no_sync
from accel.fsdp.wrap import shard_model
from accel.kwargs_handlers import Handlers
from accel.parallel.sharded_checkpoints import ShardedCheckpointsMixin
from accel.parallel.strategy import ParallelStrategy
from accel.training.model import unwrap_model

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import ValueType
    from torch.distributed.device_mesh import DeviceMesh

    from accel.training.optimizer import AcceleratedOptimizer


class FSDPStrategy(ShardedCheckpointsMixin, ParallelStrategy):
    """Fully sharded data parallelism (FSDP2) with the options of `plugin`."""

    name: ClassVar[str] = "fsdp"
    shards_parameters: ClassVar[bool] = True

    def __init__(
        self, process_state: ProcessState, precision: PrecisionBackend, handlers: Handlers,
        plugin: FullyShardedDataParallelPlugin, mesh: DeviceMesh | None = None,
    ) -> None:
        super().__init__(process_state, precision, handlers)
        self.plugin = plugin
        self.mesh = mesh
        """What fully_shard shards over: the mesh's (dp_replicate, dp_shard_cp) dimensions, 2-D for HSDP; None: all
        processes in one dimension."""
        self.names: dict[int, str] = {}
        """id(parameter) -> name of every parameter sharded so far, before and after conversion."""
        self.loading: str | None = None
        """How the model being prepared gets its weights after sharding (meta_loading.loading_mode), or None."""

    @property
    def sharded_checkpoints(self) -> bool:
        return self.plugin.sharded_state_dict

    def checkpoint_record(self) -> dict[str, Any]:
        """The plugin's settings that shape the checkpoint (the manifest's `fsdp` field)."""
        return {
            "state_dict_type": self.plugin.state_dict_type,
            "fsdp_version": self.plugin.fsdp_version,
            "reshard_after_forward": self.plugin.reshard_after_forward,
            "cpu_offload": bool(self.plugin.cpu_offload),
        }

    def parameter_names(self, model: nn.Module) -> dict[int, str]:
        """Taken before the precision converts the model: a backend may replace Parameters (torchao's FP8
        all-gather wraps each weight in a new one), and an optimizer built before prepare still holds
        the originals; `wrap_model` points it at the sharded parameters of the same names."""
        return parameter_names(unwrap_model(model, keep_torch_compile=False))

    def builds_on_meta(self) -> bool:
        """Under cpu_ram_efficient_loading with several processes, every process but 0 builds on the meta device."""
        state = self.process_state
        return self.plugin.cpu_ram_efficient_loading and state.distributed and state.process_index != 0

    def defers_materialization(self, model: nn.Module) -> bool:
        """With several processes, True when process 0's weights are sent into the shards
        (cpu_ram_efficient_loading) or the model is on the meta device on every process (empty_init).
        Every process must call it (it compares the processes' models)."""
        if not self.process_state.distributed:
            return False
        self.loading = meta_loading.loading_mode(model, self.plugin.cpu_ram_efficient_loading, self.process_state)
        return self.loading is not None

    def wrap_model(self, model: nn.Module, names: dict[int, str], optimizers: Sequence[AcceleratedOptimizer]) -> nn.Module:
        """`model` sharded with the plugin; `optimizers` prepared earlier follow its new parameters
        (found by `names`, taken before conversion, and by the names of the converted model). A model
        whose weights come later (`defers_materialization`) is sharded on the meta device, then filled."""
        names = {**names, **parameter_names(model)}
        precision = self.precision.fsdp_precision
        mode, self.loading = self.loading, None
        pending = meta_loading.before_sharding(model, mode, self.process_state) if mode else None
        model = shard_model(model, self.plugin, precision, self.process_state.device, self.process_state, self.mesh)
        if pending is not None:
            meta_loading.after_sharding(model, pending, self.process_state, self.plugin.offload_policy is not None)
        gather_when_saved(model)
        self.names.update(names)
        for wrapped in optimizers:
            retarget_optimizer(wrapped.optimizer, names, model)
        return model

    def retarget_optimizer(self, optimizer: torch.optim.Optimizer, models: Sequence[nn.Module]) -> None:
        """Point an optimizer built before its model was sharded at the sharded parameters."""
        for model in models:  # the names are those of the model as given (not of a compiled wrapper's _orig_mod.)
            retarget_optimizer(optimizer, self.names, unwrap_model(model, keep_torch_compile=False))

    def no_sync(self, model: nn.Module) -> AbstractContextManager[Any]:
        """Skip the gradient reduce-scatter inside the block (FSDP2's set_requires_gradient_sync)."""
        return no_sync(model) if is_sharded(model) else super().no_sync(model)

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """The total norm over all shards of all processes (every process must call it)."""
        return clip_grad_norm_(parameters, max_norm, norm_type)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every process must call it (the shards are all-gathered); the main one gets the full tensors."""
        return full_state_dict(model) if is_sharded(model) else super().full_state_dict(model)

    def weight_shapes(self, model: nn.Module) -> dict[str, tuple[int, ...]] | None:
        """Full shapes without gathering (every process checks; none holds the weights)."""
        if not is_sharded(model):
            return None
        state = cast(dict[str, torch.Tensor], get_model_state_dict(model))  # its parameters and buffers: tensors
        return {name: tuple(t.shape) for name, t in state.items()}

    def load_full_weights(self, model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
        """Every process gets the full weights and keeps its shards of them."""
        if not is_sharded(model):
            super().load_full_weights(model, weights)
            return
        # torch's parameter is a dict (invariant) of its ValueType union, of which a tensor is one
        state = cast("dict[str, ValueType]", weights)
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))
