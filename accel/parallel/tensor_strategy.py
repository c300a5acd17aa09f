"""TensorParallelStrategy: prepared models split over the mesh's "tp" dimension, optionally FSDP2-sharded over "dp_shard".

Each process of a tp group holds a slice of every planned layer (torch's DTensor) and computes its part of
each product; the activations are exchanged inside forward and backward. With a "dp_shard" dimension the
result is also sharded with FSDP2 over the data-parallel processes (2-D); with "dp_replicate" too, HSDP + TP.
Optimizers built before prepare follow the new parameters (by name); clipping takes the norm over all
slices; the full weights are gathered; checkpoints store every process's slices with
torch.distributed.checkpoint (accel.parallel.sharded_checkpoints.ShardedCheckpointsMixin), which reload onto
another layout (another tp size, FSDP2, one process).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ParallelStyle

from accel.backends.base import PrecisionBackend
from accel.distributed.process_state import ProcessState
from accel.fsdp.optimizer import parameter_names, retarget_optimizer
from accel.fsdp.plugin import FullyShardedDataParallelPlugin
from accel.fsdp.sharded_model import full_state_dict, is_sharded, no_sync
from accel.kwargs_handlers import BitsandbytesKwargs, Handlers
from accel.parallel import tensor_parallel as tp
from accel.parallel.sharded_checkpoints import ShardedCheckpointsMixin
from accel.parallel.strategy import ParallelStrategy
from accel.parallel.tensor_plan import choose_plan, resolve_plan
from accel.training.model import unwrap_model

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import ValueType

    from accel.training.optimizer import AcceleratedOptimizer


def quantization_refusal(mode: str, tp_size: int) -> str:
    """Why bitsandbytes `mode` cannot run with tensor parallelism over `tp_size` processes (the Accelerator
    and `accel config`/`accel launch`'s configuration check say the same)."""
    return (
        f"BitsandbytesKwargs(mode={mode!r}) with tensor parallelism (tp_size={tp_size}) cannot "
        "run: every bitsandbytes mode replaces the nn.Linear layers by quantized ones whose packed weights "
        "torch's ColwiseParallel/RowwiseParallel cannot split. Use one or the other: tp_size=1 with "
        "BitsandbytesKwargs, or tensor parallelism without it."
    )


class TensorParallelStrategy(ShardedCheckpointsMixin, ParallelStrategy):
    """Tensor parallelism on `mesh["tp"]`, with FSDP2 over `mesh["dp_shard"]` when it has one (2-D).

    `plan` maps module names (with `*` for one name part) to styles ("colwise", "rowwise", ... or torch
    ParallelStyle objects); without one, the model's own `tp_plan` (transformers) is used. `fsdp_plugin`
    gives the FSDP2 options of the 2-D layout (default options without one).

    Example (in a script launched on 4 processes)::

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
        strategy = TensorParallelStrategy(state, precision, handlers, mesh, None, {"fc1": "colwise", "fc2": "rowwise"})
    """

    name: ClassVar[str] = "tensor_parallel"
    shards_parameters: ClassVar[bool] = True

    def __init__(
        self,
        process_state: ProcessState,
        precision: PrecisionBackend,
        handlers: Handlers,
        mesh: DeviceMesh,
        fsdp_plugin: FullyShardedDataParallelPlugin | None = None,
        plan: Mapping[str, str | ParallelStyle] | None = None,
    ) -> None:
        super().__init__(process_state, precision, handlers)
        check_mesh(mesh, process_state)
        precision.configure_tensor_parallel()  # an FP8 backend refuses here, naming what would work
        if handlers.supplies(BitsandbytesKwargs):
            raise ValueError(quantization_refusal(handlers.get(BitsandbytesKwargs).mode, tp.dim_size(mesh, "tp")))
        self.mesh = mesh
        self.tp_size = tp.dim_size(mesh, "tp")
        self.data_sharded = tp.dim_size(mesh, "dp_shard") > 1
        self.plugin = fsdp_plugin or (FullyShardedDataParallelPlugin() if self.data_sharded else None)
        self.plan = dict(plan) if plan is not None else None
        self.names: dict[int, str] = {}
        """id(parameter) -> name of every parameter split so far, before and after conversion."""

    @property
    def sharded_checkpoints(self) -> bool:
        """Always: every process writes its slices (a FULL_STATE_DICT plugin still gathers, as under FSDP)."""
        return self.plugin is None or self.plugin.sharded_state_dict

    def checkpoint_record(self) -> dict[str, Any]:
        """The layout that shaped the checkpoint (the manifest's `fsdp` field; a sharded checkpoint reloads on any)."""
        record: dict[str, Any] = {
            "state_dict_type": "SHARDED_STATE_DICT" if self.sharded_checkpoints else "FULL_STATE_DICT",
            "tp_size": self.tp_size,
            "mesh": dict(zip(self.mesh.mesh_dim_names or (), self.mesh.shape)),
        }
        if self.plugin is not None:
            plugin = self.plugin
            record.update(fsdp_version=plugin.fsdp_version, reshard_after_forward=plugin.reshard_after_forward,
                          cpu_offload=bool(plugin.cpu_offload))
        return record

    # ----------------------------------------------------------------- prepare
    def parameter_names(self, model: nn.Module) -> dict[int, str]:
        """Taken before the precision converts the model, so that optimizers built earlier can follow."""
        return parameter_names(unwrap_model(model))

    def wrap_model(self, model: nn.Module, names: dict[int, str], optimizers: Sequence[AcceleratedOptimizer]) -> nn.Module:
        """`model` split over the tp processes (its plan checked first), then sharded over "dp_shard" if the
        mesh has it; `optimizers` prepared earlier follow its new parameters.

        A model whose parameters are DTensors already (transformers' `from_pretrained(tp_plan=..., device_mesh=...)`)
        is not split again; its mesh must be this one's "tp" dimension.
        """
        names = {**names, **parameter_names(model)}
        if tp.is_tensor_parallel(model):
            self._check_presplit(model)
        else:
            plan, given = choose_plan(model, self.plan)
            styles = resolve_plan(model, plan, self.tp_size, given)
            tp.parallelize(model, self.mesh, styles)
        if self.data_sharded:
            assert self.plugin is not None  # set in __init__ whenever data_sharded
            tp.shard_data_parallel(model, self.mesh, self.plugin, self.precision.fsdp_precision)
        self.names.update(names)
        for wrapped in optimizers:
            retarget_optimizer(wrapped.optimizer, names, model)
        return model

    def _check_presplit(self, model: nn.Module) -> None:
        meshes = {p.device_mesh for p in model.parameters() if isinstance(p, DTensor)}
        if any(mesh.size() != self.tp_size for mesh in meshes):
            sizes = sorted({mesh.size() for mesh in meshes})
            raise ValueError(
                f"prepare: the model is split over {sizes} processes already, but tp_size is {self.tp_size}. Load it "
                "with device_mesh=accelerator.torch_device_mesh['tp'], or give tp_size equal to its split."
            )

    def retarget_optimizer(self, optimizer: torch.optim.Optimizer, models: Sequence[nn.Module]) -> None:
        """Point an optimizer built before its model was split at the split parameters."""
        for model in models:
            retarget_optimizer(optimizer, self.names, model)

    # ----------------------------------------------------------------- training step
    def no_sync(self, model: nn.Module) -> AbstractContextManager[Any]:
        """Skip FSDP2's gradient reduce-scatter inside the block (2-D); with TP alone there is nothing to
        skip: the tp collectives are part of the forward and backward themselves."""
        return no_sync(model) if is_sharded(model) else nullcontext()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """The total norm over all slices and shards of all processes (every process must call it)."""
        return tp.clip_grad_norm_(parameters, max_norm, norm_type)

    # ----------------------------------------------------------------- weights
    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every process must call it (the slices are gathered); the main one gets the full tensors on the CPU."""
        if not tp.is_tensor_parallel(model):
            return super().full_state_dict(model)
        return full_state_dict(model) if is_sharded(model) else _gathered(model)

    def weight_shapes(self, model: nn.Module) -> dict[str, tuple[int, ...]] | None:
        """Full shapes without gathering (a DTensor knows its global shape)."""
        if not tp.is_tensor_parallel(model):
            return None
        state = cast(dict[str, torch.Tensor], get_model_state_dict(model))
        return {name: tuple(t.shape) for name, t in state.items()}

    def load_full_weights(self, model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
        """Every process gets the full weights and keeps its slices of them."""
        if not tp.is_tensor_parallel(model):
            super().load_full_weights(model, weights)
            return
        state = cast("dict[str, ValueType]", weights)
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))


def _gathered(model: nn.Module) -> dict[str, torch.Tensor]:
    """A tensor-parallel (not FSDP-sharded) model's full weights on the main process's CPU (others: empty)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return cast(dict[str, torch.Tensor], get_model_state_dict(model, options=options))


def check_mesh(mesh: DeviceMesh, process_state: ProcessState) -> None:
    """Raise ValueError for a mesh tensor parallelism cannot run on, saying what would."""
    names = tuple(mesh.mesh_dim_names or ())
    if "tp" not in names:
        raise ValueError(
            f"TensorParallelStrategy: the mesh's dimensions are {names}, without 'tp'. Build it with a 'tp' dimension "
            "(ParallelismConfig(tp_size=...), or init_device_mesh(..., mesh_dim_names=('dp_shard', 'tp')))."
        )
    if mesh.size() != process_state.num_processes:
        raise ValueError(
            f"TensorParallelStrategy: the mesh {dict(zip(names, mesh.shape))} holds {mesh.size()} processes, but "
            f"{process_state.num_processes} run. Give a mesh whose sizes multiply to the number of processes."
        )
    unknown = [name for name in names if name not in ("tp", *tp.DATA_DIMS) and tp.dim_size(mesh, name) > 1]
    if unknown:
        raise ValueError(
            f"TensorParallelStrategy: mesh dimension(s) {unknown} are not run with tensor parallelism (context "
            "parallelism is not provided). Use a mesh of 'dp_replicate', 'dp_shard' and 'tp'."
        )
    if tp.dim_size(mesh, "dp_replicate") > 1 and tp.dim_size(mesh, "dp_shard") == 1:
        raise ValueError(
            f"TensorParallelStrategy: dp_replicate_size={tp.dim_size(mesh, 'dp_replicate')} with tensor parallelism "
            "and no dp_shard dimension would need DistributedDataParallel over DTensor parameters, which torch does not "
            "run (its broadcast has no DTensor sharding rule). Use dp_shard_size instead (FSDP2 + TP, the same "
            "memory or less), or dp_replicate_size with dp_shard_size > 1 (HSDP + TP)."
        )
