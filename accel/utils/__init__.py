"""`accel.utils`: the names scripts import from `accelerate.utils`, at the same names.

This package re-exports; the logic lives where its concern is (accel.distributed, accel.data,
accel.training, accel.kwargs_handlers, ...). The functional collectives (`gather`, `reduce`, ...)
act on this process's current state, the layout torchrun gave it and the running process group.
See docs/migration.md for each name's status and its differences from Accelerate.

The modules, by job:

* Accelerate's submodule paths (`accelerate.utils.<name>`), re-exporting what lives elsewhere:
  dataclasses.py (the configuration classes and enums), memory.py (`release_memory`,
  `find_executable_batch_size`, ...), random.py (`set_seed`), versions.py (`is_torch_version`,
  `compare_versions`);
* helpers written here (each at Accelerate's path too, structures.py aside): imports.py (the
  `is_*_available` checks and `is_torch_version`), environment.py (`patch_environment`,
  `write_basic_config` and the other environment helpers), operations.py (the functional
  collectives, on this process's current state), structures.py (nested structures of tensors:
  `recursively_apply`, `concatenate`, ...), other.py (`extract_model_from_parallel`, `save`, `tqdm`);
* big-model inference, forwarded to Accelerate when it is installed: modeling.py (device maps,
  checkpoint loading), offload.py (weights offloaded to disk).
"""

from __future__ import annotations

from typing import Any

from accel._accelerate_names import forwarding, refusals
from accel.data.skipping import skip_first_batches
from accel.deepspeed import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    DeepSpeedPlugin,
    DeepSpeedSchedulerWrapper,
    DummyOptim,
    DummyScheduler,
)
from accel.fsdp import FullyShardedDataParallelPlugin
from accel.kwargs_handlers.context_parallel import TorchContextParallelConfig
from accel.kwargs_handlers.sequence_parallel import DeepSpeedSequenceParallelConfig
from accel.kwargs_handlers.tensor_parallel import TorchTensorParallelConfig, TorchTensorParallelPlugin
from accel.parallel.config import ParallelismConfig
from accel.training.out_of_memory import (
    clear_device_cache,
    find_executable_batch_size,
    release_memory,
    should_reduce_batch_size,
)
from accel.training.seeding import set_seed, synchronize_rng_states
from accel.utils.dataclasses import (
    AORecipeKwargs,
    AutocastKwargs,
    BitsandbytesKwargs,
    DataLoaderConfiguration,
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    DistributedType,
    DynamoBackend,
    FP8RecipeKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    MSAMPRecipeKwargs,
    PrecisionType,
    ProfileKwargs,
    ProjectConfiguration,
    TERecipeKwargs,
    TorchDynamoPlugin,
)
from accel.utils.environment import (
    check_os_kernel,
    clear_environment,
    convert_dict_to_env_variables,
    patch_environment,
    purge_accelerate_environment,
    write_basic_config,
)
from accel.utils.imports import (
    compare_versions,
    is_aim_available,
    is_bf16_available,
    is_bnb_available,
    is_boto3_available,
    is_clearml_available,
    is_comet_ml_available,
    is_cuda_available,
    is_datasets_available,
    is_deepspeed_available,
    is_dvclive_available,
    is_fp8_available,
    is_fp16_available,
    is_hpu_available,
    is_import_timer_available,
    is_lomo_available,
    is_matplotlib_available,
    is_mlflow_available,
    is_mlu_available,
    is_mps_available,
    is_msamp_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_pandas_available,
    is_peft_available,
    is_pynvml_available,
    is_pytest_available,
    is_rich_available,
    is_rocm_available,
    is_schedulefree_available,
    is_sdaa_available,
    is_swanlab_available,
    is_tensorboard_available,
    is_timm_available,
    is_torch_version,
    is_torch_xla_available,
    is_torchao_available,
    is_torchdata_available,
    is_torchdata_stateful_dataloader_available,
    is_torchvision_available,
    is_tqdm_available,
    is_trackio_available,
    is_transformer_engine_available,
    is_transformers_available,
    is_triton_available,
    is_wandb_available,
    is_xpu_available,
    str_to_bool,
)
from accel.utils.operations import (
    CannotPadNestedTensorWarning,
    broadcast,
    broadcast_object_list,
    copy_tensor_to_devices,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
    send_to_device,
    wait_for_everyone,
)
from accel.utils.other import extract_model_from_parallel, save, tqdm
from accel.utils.structures import (
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    find_device,
    honor_type,
    is_namedtuple,
    is_torch_tensor,
    listify,
    pad_input_tensors,
    recursively_apply,
    slice_tensors,
)

_FROM_TRACKING = ("LoggerType",)
"""Names that live in accel.tracking, imported on first use."""

__all__ = [
    "AORecipeKwargs",
    "AutocastKwargs",
    "BitsandbytesKwargs",
    "CannotPadNestedTensorWarning",
    "DDPCommunicationHookType",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "DynamoBackend",
    "FP8RecipeKwargs",
    "DeepSpeedEngineWrapper",
    "DeepSpeedOptimizerWrapper",
    "DeepSpeedPlugin",
    "DeepSpeedSchedulerWrapper",
    "DummyOptim",
    "DummyScheduler",
    "FullyShardedDataParallelPlugin",
    "ParallelismConfig",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "MSAMPRecipeKwargs",
    "PrecisionType",
    "ProfileKwargs",
    "ProjectConfiguration",
    "TERecipeKwargs",
    "TorchDynamoPlugin",
    "TorchContextParallelConfig",
    "DeepSpeedSequenceParallelConfig",
    "TorchTensorParallelConfig",
    "TorchTensorParallelPlugin",
    "broadcast",
    "broadcast_object_list",
    "check_os_kernel",
    "clear_device_cache",
    "clear_environment",
    "compare_versions",
    "concatenate",
    "convert_dict_to_env_variables",
    "convert_outputs_to_fp32",
    "convert_to_fp32",
    "copy_tensor_to_devices",
    "extract_model_from_parallel",
    "find_device",
    "find_executable_batch_size",
    "gather",
    "gather_object",
    "honor_type",
    "is_aim_available",
    "is_bf16_available",
    "is_bnb_available",
    "is_boto3_available",
    "is_clearml_available",
    "is_comet_ml_available",
    "is_cuda_available",
    "is_datasets_available",
    "is_deepspeed_available",
    "is_dvclive_available",
    "is_fp16_available",
    "is_fp8_available",
    "is_hpu_available",
    "is_import_timer_available",
    "is_lomo_available",
    "is_matplotlib_available",
    "is_mlflow_available",
    "is_mlu_available",
    "is_mps_available",
    "is_msamp_available",
    "is_musa_available",
    "is_namedtuple",
    "is_neuron_available",
    "is_npu_available",
    "is_pandas_available",
    "is_peft_available",
    "is_pynvml_available",
    "is_pytest_available",
    "is_rich_available",
    "is_rocm_available",
    "is_schedulefree_available",
    "is_sdaa_available",
    "is_swanlab_available",
    "is_tensorboard_available",
    "is_timm_available",
    "is_torch_tensor",
    "is_torch_version",
    "is_torch_xla_available",
    "is_torchao_available",
    "is_torchdata_available",
    "is_torchdata_stateful_dataloader_available",
    "is_torchvision_available",
    "is_tqdm_available",
    "is_trackio_available",
    "is_transformer_engine_available",
    "is_transformers_available",
    "is_triton_available",
    "is_wandb_available",
    "is_xpu_available",
    "listify",
    "pad_across_processes",
    "pad_input_tensors",
    "patch_environment",
    "purge_accelerate_environment",
    "recursively_apply",
    "reduce",
    "release_memory",
    "save",
    "send_to_device",
    "set_seed",
    "should_reduce_batch_size",
    "skip_first_batches",
    "slice_tensors",
    "str_to_bool",
    "synchronize_rng_states",
    "tqdm",
    "wait_for_everyone",
    "write_basic_config",
]


_BIG_MODEL = frozenset({
    "OffloadedWeightsLoader", "PrefixedDataset", "align_module_device", "calculate_maximum_sizes", "check_device_map",
    "check_tied_parameters_in_config", "check_tied_parameters_on_same_device", "compute_module_sizes",
    "convert_file_size_to_int", "dtype_byte_size", "extract_submodules_state_dict", "find_tied_parameters",
    "get_balanced_memory", "get_max_layer_size", "get_max_memory", "has_offloaded_params", "id_tensor_storage",
    "infer_auto_device_map", "load_checkpoint_in_model", "load_offloaded_weight", "load_offloaded_weights",
    "load_state_dict", "named_module_tensors", "offload_state_dict", "offload_weight", "retie_parameters",
    "save_offload_index", "set_module_tensor_to_device",
})
"""accelerate.utils' names from its modeling and offload modules (big-model inference): Accelerate's own,
forwarded when accelerate is installed, else stand-ins that raise ImportError naming the install when used."""
_forward_big_model = forwarding("accelerate.utils", _BIG_MODEL, __name__)

_DEEPSPEED = ("DeepSpeed's parameter gathering, transformers' ZeRO 3 init hook and several plugins are not provided "
              "(DeepSpeedPlugin is, and DeepSpeed's sequence parallelism: docs/deepspeed.md, docs/long-context.md)")
_REFUSED = {
    "GatheredParameters": _DEEPSPEED,
    "HfDeepSpeedConfig": _DEEPSPEED,
    "get_active_deepspeed_plugin": _DEEPSPEED,
    "map_pytorch_optim_to_deepspeed": "accel keeps the script's optimizer under DeepSpeed's CPU offload (docs/deepspeed.md)",
    "MegatronLMPlugin": "Megatron-LM's tensor/pipeline parallelism needs its model code; use Accelerate or NeMo",
    "BnbQuantizationConfig": "quantize through Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode=...)]) (docs/quantization.md)",
    "load_and_quantize_model": "quantize through Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode=...)]) "
    "(docs/quantization.md)",
    "RNGType": "rng_types= takes the names as strings ('torch', 'cuda', 'generator', ...)",
    "synchronize_rng_state": "call synchronize_rng_states([name])",
}
"""accelerate.utils' names accel does not implement: importable, raising NotImplementedError with the reason
when used (docs/migration.md)."""
_refused = refusals(_REFUSED, __name__)


def __getattr__(name: str) -> Any:
    if name in _BIG_MODEL:
        return _forward_big_model(name)
    if name in _REFUSED:
        return _refused(name)
    if name in _FROM_TRACKING:
        import accel.tracking

        value = getattr(accel.tracking, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'accel.utils' has no attribute {name!r}")
