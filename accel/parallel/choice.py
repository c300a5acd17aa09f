"""create_strategy: the one place where an Accelerator's parallelism strategy is chosen.

The Accelerator calls it once in its constructor, with the plugins and layout it resolved; everything
else asks the strategy it was given (accel.parallel.strategy.ParallelStrategy). Each engine's strategy
module is imported only when that engine is chosen: a run without a plugin or a mesh loads no FSDP2,
DTensor or DeepSpeed code from here.
"""

from __future__ import annotations

from typing import Any, cast

from accel.backends.base import PrecisionBackend
from accel.distributed.process_state import ProcessState
from accel.kwargs_handlers import Handlers
from accel.parallel.strategy import DataParallelStrategy, ParallelStrategy


def create_strategy(
    fsdp_plugin: Any, process_state: ProcessState, precision: PrecisionBackend, handlers: Handlers,
    parallelism: Any = None, mesh: Any = None, deepspeed_plugin: Any = None,
) -> ParallelStrategy:
    """The strategy that runs. With a DeepSpeedPlugin: DeepSpeed's engine (accel.deepspeed). Else tensor
    parallelism when the ParallelismConfig (`accel.parallel.layout.resolve`) has tp_size > 1 (with FSDP2 over
    the data-parallel dimensions when `fsdp_plugin` is given: 2-D); else FSDP2 with a plugin (checked by the
    Accelerator's options), over the mesh's (dp_replicate, dp_shard_cp) dimensions when there is a mesh (2-D:
    HSDP); else data parallelism (one process, or DDP over several)."""
    if deepspeed_plugin is not None:
        from accel.deepspeed.strategy import DeepSpeedStrategy

        return DeepSpeedStrategy(process_state, cast("Any", precision), handlers, deepspeed_plugin)
    if parallelism is not None and parallelism.tp_enabled:
        return _tensor_parallel(process_state, precision, handlers, mesh, fsdp_plugin, parallelism)
    if fsdp_plugin is None:
        return DataParallelStrategy(process_state, precision, handlers)
    from accel.fsdp.strategy import FSDPStrategy  # torch.distributed.fsdp only where FSDP runs
    from accel.parallel.mesh import submesh

    fsdp_mesh = None if mesh is None else submesh(mesh, parallelism.fsdp_dim_names)
    return FSDPStrategy(process_state, precision, handlers, fsdp_plugin, fsdp_mesh)


def _tensor_parallel(
    process_state: ProcessState, precision: PrecisionBackend, handlers: Handlers, mesh: Any, fsdp_plugin: Any,
    parallelism: Any,
) -> ParallelStrategy:
    """TensorParallelStrategy over the whole mesh (tp, and the data-parallel dimensions FSDP2 shards over in
    2-D); the plan: the user's (ParallelismConfig(tp_handler=TorchTensorParallelConfig(plan=...))), else the
    model's own tp_plan, found at prepare."""
    from accel.parallel.tensor_strategy import TensorParallelStrategy

    handler = parallelism.tp_handler
    return TensorParallelStrategy(process_state, precision, handlers, mesh, fsdp_plugin, handler.plan if handler else None)
