"""accel: run an ordinary PyTorch training script in the precision you ask for.

The public API is imported lazily, so that `accel --help` and `import accel._version`
do not pay for importing torch.

The package root keeps only Accelerate's import paths and private helpers:

* Accelerate's import paths (`accelerate.state` is `accel.state`, and so on): big_modeling.py
  (`init_empty_weights`, `init_on_device`; offloading and dispatch forwarded to Accelerate),
  data_loader.py (`prepare_data_loader`, `skip_first_batches` and the prepared dataloader's
  classes), hooks.py (big-model inference's module hooks, forwarded), launchers.py
  (`notebook_launcher`, `debug_launcher`), local_sgd.py (`LocalSGD`), logging.py (`get_logger`, the
  process-aware logger), parallelism_config.py (`ParallelismConfig`), state.py (`PartialState`,
  `AcceleratorState`, `GradientState`);
* private helpers: _version.py (the version, readable without torch), _warnings.py (`PrecisionWarning`,
  and warnings given once), _validation.py (one clear error for a bad argument), _tree.py (a function
  applied to every tensor of a nested structure), _lazy.py (lazy re-exports for package `__init__`
  modules), _accelerate_names.py (Accelerate's names that accel forwards to Accelerate or refuses);
  __main__.py runs the command line (`python -m accel`).

The subpackages, by job:

* the facade: accelerator/ (the Accelerator: its constructor options and method groups),
  kwargs_handlers/ (the option objects of `kwarg_handlers=[...]`), settings/ (the settings schema: one
  name per setting, from which its YAML key, flag, ACCEL_* variable and keyword derive);
* the training step: training/ (the wrappers around optimizer, scheduler and model, gradient
  accumulation, torch.compile), data/ (the prepared DataLoader and each
  process's part of the data), backends/ (the precisions: fp32, fp16/bf16 mixed, 16-bit true, FP8, and
  the precision under DeepSpeed), quantization/ (bitsandbytes' 4-bit and 8-bit Linear layers);
* processes: distributed/ (which process this is, its process group, the collectives), parallel/ (how a
  model is placed over them: every strategy's interface and the one place that chooses it, the device
  mesh of a ParallelismConfig, tensor parallelism), fsdp/ (sharded training on FSDP2), deepspeed/
  (training through DeepSpeed's ZeRO engine);
* around the run: checkpointing/ (`save_state` / `load_state`), tracking/ (experiment trackers),
  monitoring/ (throughput, MFU, loss spikes), utils/ (the names of `accelerate.utils`), test_utils/
  (the names of `accelerate.test_utils`);
* before the run: estimate/ (the memory a model needs to load, and each rank's bytes to train it);
* the command line: cli/ (`accel config`, `launch`, `env`, `test`, `bench`, `estimate-memory`), bench/
  (what `accel bench` trains, runs and reports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from accel._accelerate_names import refusals
from accel._version import __version__
from accel._warnings import PrecisionWarning

if TYPE_CHECKING:  # explicit re-exports, so that type checkers see the lazy names
    from accel.accelerator import Accelerator as Accelerator
    from accel.backends.loss_scaler import LossScaleOverflowError as LossScaleOverflowError
    from accel.big_modeling import init_empty_weights as init_empty_weights
    from accel.big_modeling import init_on_device as init_on_device
    from accel.checkpointing import ProjectConfiguration as ProjectConfiguration
    from accel.data.configuration import DataLoaderConfiguration as DataLoaderConfiguration
    from accel.data.skipping import skip_first_batches as skip_first_batches
    from accel.deepspeed import DeepSpeedPlugin as DeepSpeedPlugin
    from accel.distributed.partial_state import AcceleratorState as AcceleratorState
    from accel.distributed.partial_state import PartialState as PartialState
    from accel.distributed.types import DistributedType as DistributedType
    from accel.fsdp import FullyShardedDataParallelPlugin as FullyShardedDataParallelPlugin
    from accel.kwargs_handlers import AutocastKwargs as AutocastKwargs
    from accel.kwargs_handlers import BitsandbytesKwargs as BitsandbytesKwargs
    from accel.kwargs_handlers import DDPCommunicationHookType as DDPCommunicationHookType
    from accel.kwargs_handlers import DistributedDataParallelKwargs as DistributedDataParallelKwargs
    from accel.kwargs_handlers import FP8RecipeKwargs as FP8RecipeKwargs
    from accel.kwargs_handlers import GradScalerKwargs as GradScalerKwargs
    from accel.kwargs_handlers import InitProcessGroupKwargs as InitProcessGroupKwargs
    from accel.kwargs_handlers import ProfileKwargs as ProfileKwargs
    from accel.kwargs_handlers import SpikeDetectionKwargs as SpikeDetectionKwargs
    from accel.kwargs_handlers import ThroughputKwargs as ThroughputKwargs
    from accel.launchers import debug_launcher as debug_launcher
    from accel.launchers import notebook_launcher as notebook_launcher
    from accel.monitoring import LossSpikeError as LossSpikeError
    from accel.parallel.config import ParallelismConfig as ParallelismConfig
    from accel.training.accumulation import GradientAccumulationPlugin as GradientAccumulationPlugin
    from accel.training.out_of_memory import find_executable_batch_size as find_executable_batch_size
    from accel.training.seeding import synchronize_rng_states as synchronize_rng_states
    from accel.utils import is_rich_available as is_rich_available

_EXPORTS = {
    "Accelerator": "accel.accelerator",
    "AutocastKwargs": "accel.kwargs_handlers",
    "BitsandbytesKwargs": "accel.kwargs_handlers",
    "DDPCommunicationHookType": "accel.kwargs_handlers",
    "DistributedDataParallelKwargs": "accel.kwargs_handlers",
    "FP8RecipeKwargs": "accel.kwargs_handlers",
    "GradScalerKwargs": "accel.kwargs_handlers",
    "InitProcessGroupKwargs": "accel.kwargs_handlers",
    "LossScaleOverflowError": "accel.backends.loss_scaler",
    "ProjectConfiguration": "accel.checkpointing",
    "AcceleratorState": "accel.distributed.partial_state",
    "DataLoaderConfiguration": "accel.data.configuration",
    "DistributedType": "accel.distributed.types",
    "GradientAccumulationPlugin": "accel.training.accumulation",
    "PartialState": "accel.distributed.partial_state",
    "find_executable_batch_size": "accel.training.out_of_memory",
    "skip_first_batches": "accel.data.skipping",
    "init_empty_weights": "accel.big_modeling",
    "init_on_device": "accel.big_modeling",
    "notebook_launcher": "accel.launchers",
    "debug_launcher": "accel.launchers",
    "ProfileKwargs": "accel.kwargs_handlers",
    "SpikeDetectionKwargs": "accel.kwargs_handlers",
    "ThroughputKwargs": "accel.kwargs_handlers",
    "LossSpikeError": "accel.monitoring",
    "FullyShardedDataParallelPlugin": "accel.fsdp",
    "DeepSpeedPlugin": "accel.deepspeed",
    "ParallelismConfig": "accel.parallel.config",
    "synchronize_rng_states": "accel.training.seeding",
    "is_rich_available": "accel.utils",
}

__all__ = [*_EXPORTS, "PrecisionWarning", "__version__"]


_FORWARDED = {
    "cpu_offload": "accel.big_modeling",
    "cpu_offload_with_hook": "accel.big_modeling",
    "disk_offload": "accel.big_modeling",
    "dispatch_model": "accel.big_modeling",
    "load_checkpoint_and_dispatch": "accel.big_modeling",
    "infer_auto_device_map": "accel.utils.modeling",
    "load_checkpoint_in_model": "accel.utils.modeling",
}
"""Accelerate's big-model inference, which accel leaves to Accelerate: its own objects when accelerate
is installed, else stand-ins that raise ImportError naming the install (accel/_accelerate_names.py)."""

_REFUSED = {
    "prepare_pippy": "pipeline-parallel inference is not accel's job; use Accelerate's prepare_pippy beside accel",
}
"""Accelerate's top-level names accel does not implement: importable, and raising NotImplementedError with
the reason when used (docs/migration.md)."""
_refused = refusals(_REFUSED, __name__)


def __getattr__(name: str) -> Any:
    if name in _FORWARDED:
        return getattr(importlib.import_module(_FORWARDED[name]), name)
    if name in _REFUSED:
        return _refused(name)
    if name not in _EXPORTS:
        raise AttributeError(f"module 'accel' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
