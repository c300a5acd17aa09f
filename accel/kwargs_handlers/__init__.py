"""Kwargs handlers: frozen, validated option objects passed as `Accelerator(kwarg_handlers=[...])`.

The modules, by job:

* the base: base.py (`KwargsHandler`: a frozen, keyword-only dataclass that validates itself),
  handlers.py (the `kwarg_handlers=` list collected into one slot per handler type);
* precision: amp.py (`GradScalerKwargs`, `AutocastKwargs`), fp8.py (`FP8RecipeKwargs`: one FP8
  recipe for every FP8 backend), fp8_names.py (Accelerate's `TERecipeKwargs`, `MSAMPRecipeKwargs`
  and `AORecipeKwargs`, as spellings of it), bitsandbytes.py (`BitsandbytesKwargs`: quantized
  Linear weights);
* processes: torch_distributed.py (`DistributedDataParallelKwargs`, `InitProcessGroupKwargs`),
  comm_hooks.py (DDP communication hooks chosen by name), tensor_parallel.py
  (`TorchTensorParallelPlugin`, `TorchTensorParallelConfig`), context_parallel.py
  (`TorchContextParallelConfig`), sequence_parallel.py (`DeepSpeedSequenceParallelConfig`), fsdp_names.py
  (the names of FSDP's options that the command line shares with the plugin; torch-free);
* the rest of a run: dynamo.py (`TorchDynamoPlugin`, `DynamoBackend`: torch.compile's options),
  profile.py (`ProfileKwargs`, torch.profiler's options), monitoring.py (`ThroughputKwargs`,
  `SpikeDetectionKwargs`: the run monitors).
"""

from typing import TYPE_CHECKING

from accel._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, for type checkers (accel/_lazy.py)
    from accel.kwargs_handlers.amp import AutocastKwargs as AutocastKwargs
    from accel.kwargs_handlers.amp import GradScalerKwargs as GradScalerKwargs
    from accel.kwargs_handlers.base import KwargsHandler as KwargsHandler
    from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs as BitsandbytesKwargs
    from accel.kwargs_handlers.comm_hooks import DDPCommunicationHookType as DDPCommunicationHookType
    from accel.kwargs_handlers.fp8 import FP8RecipeKwargs as FP8RecipeKwargs
    from accel.kwargs_handlers.handlers import Handlers as Handlers
    from accel.kwargs_handlers.handlers import collect_handlers as collect_handlers
    from accel.kwargs_handlers.monitoring import SpikeDetectionKwargs as SpikeDetectionKwargs
    from accel.kwargs_handlers.monitoring import ThroughputKwargs as ThroughputKwargs
    from accel.kwargs_handlers.profile import ProfileKwargs as ProfileKwargs
    from accel.kwargs_handlers.torch_distributed import DistributedDataParallelKwargs as DistributedDataParallelKwargs
    from accel.kwargs_handlers.torch_distributed import InitProcessGroupKwargs as InitProcessGroupKwargs

_EXPORTS = {
    "AutocastKwargs": "accel.kwargs_handlers.amp",
    "GradScalerKwargs": "accel.kwargs_handlers.amp",
    "KwargsHandler": "accel.kwargs_handlers.base",
    "BitsandbytesKwargs": "accel.kwargs_handlers.bitsandbytes",
    "DDPCommunicationHookType": "accel.kwargs_handlers.comm_hooks",
    "FP8RecipeKwargs": "accel.kwargs_handlers.fp8",
    "Handlers": "accel.kwargs_handlers.handlers",
    "collect_handlers": "accel.kwargs_handlers.handlers",
    "SpikeDetectionKwargs": "accel.kwargs_handlers.monitoring",
    "ThroughputKwargs": "accel.kwargs_handlers.monitoring",
    "ProfileKwargs": "accel.kwargs_handlers.profile",
    "DistributedDataParallelKwargs": "accel.kwargs_handlers.torch_distributed",
    "InitProcessGroupKwargs": "accel.kwargs_handlers.torch_distributed",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "AutocastKwargs",
    "BitsandbytesKwargs",
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "FP8RecipeKwargs",
    "GradScalerKwargs",
    "Handlers",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "ProfileKwargs",
    "SpikeDetectionKwargs",
    "ThroughputKwargs",
    "collect_handlers",
]
