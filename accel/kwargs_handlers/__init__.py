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
  (`TorchTensorParallelPlugin`, `TorchTensorParallelConfig`), fsdp_names.py (the names of FSDP's
  options that the command line shares with the plugin; torch-free);
* the rest of a run: dynamo.py (`TorchDynamoPlugin`, `DynamoBackend`: torch.compile's options),
  profile.py (`ProfileKwargs`, torch.profiler's options), monitoring.py (`ThroughputKwargs`,
  `SpikeDetectionKwargs`: the run monitors).
"""

from accel.kwargs_handlers.amp import AutocastKwargs, GradScalerKwargs
from accel.kwargs_handlers.base import KwargsHandler
from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs
from accel.kwargs_handlers.comm_hooks import DDPCommunicationHookType
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.kwargs_handlers.handlers import Handlers, collect_handlers
from accel.kwargs_handlers.monitoring import SpikeDetectionKwargs, ThroughputKwargs
from accel.kwargs_handlers.profile import ProfileKwargs
from accel.kwargs_handlers.torch_distributed import DistributedDataParallelKwargs, InitProcessGroupKwargs

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
