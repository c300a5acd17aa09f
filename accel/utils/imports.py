"""Accelerate's `is_*_available` checks (devices, precisions, installed libraries) and `is_torch_version`,
for scripts that branch on them."""

from __future__ import annotations

import importlib.util
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.torch_version import TorchVersion

_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<=": operator.le, "<": operator.lt,
}


def is_cuda_available() -> bool:
    """True when a CUDA (or ROCm) GPU can be used."""
    return torch.cuda.is_available()


def is_rocm_available() -> bool:
    """True when this torch is a ROCm (AMD) build and a GPU can be used (Accelerate's check)."""
    return torch.version.hip is not None and torch.cuda.is_available()


def is_xpu_available(check_device: bool = False) -> bool:
    """True when an Intel XPU can be used."""
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def is_npu_available(check_device: bool = False) -> bool:
    """True when an Ascend NPU (torch_npu) can be used."""
    npu = getattr(torch, "npu", None)
    return npu is not None and bool(npu.is_available())


def is_mps_available(min_version: str = "1.12") -> bool:
    """True when Apple's MPS backend can be used."""
    return torch.backends.mps.is_available() and torch.backends.mps.is_built()


def is_torch_version(operation: str, version: str) -> bool:
    """Compare the installed torch's version with `version`: `is_torch_version(">=", "2.4")`."""
    if operation not in _COMPARISONS:
        accepted = ", ".join(_COMPARISONS)
        raise ValueError(f"is_torch_version(operation={operation!r}) is not accepted; use one of {accepted}.")
    return _COMPARISONS[operation](TorchVersion(torch.__version__), version)


def _installed(module: str) -> Callable[[], bool]:
    """An `is_<name>_available()` that says whether `module` can be imported (without importing it)."""

    def available() -> bool:
        return importlib.util.find_spec(module) is not None

    available.__doc__ = f"True when `{module}` is installed."
    return available


is_tensorboard_available = _installed("tensorboard")
is_wandb_available = _installed("wandb")
is_mlflow_available = _installed("mlflow")
is_aim_available = _installed("aim")
is_comet_ml_available = _installed("comet_ml")
is_clearml_available = _installed("clearml")
is_dvclive_available = _installed("dvclive")
is_datasets_available = _installed("datasets")
is_transformers_available = _installed("transformers")
is_peft_available = _installed("peft")
is_bnb_available = _installed("bitsandbytes")
is_torchao_available = _installed("torchao")
is_transformer_engine_available = _installed("transformer_engine")
is_msamp_available = _installed("msamp")
is_deepspeed_available = _installed("deepspeed")
is_rich_available = _installed("rich")
is_tqdm_available = _installed("tqdm")
is_matplotlib_available = _installed("matplotlib")
is_pytest_available = _installed("pytest")
is_torchdata_stateful_dataloader_available = _installed("torchdata")
is_torchdata_available = _installed("torchdata")
is_schedulefree_available = _installed("schedulefree")
is_pandas_available = _installed("pandas")
is_timm_available = _installed("timm")
is_torchvision_available = _installed("torchvision")
is_triton_available = _installed("triton")
is_swanlab_available = _installed("swanlab")
is_trackio_available = _installed("trackio")
is_import_timer_available = _installed("import_timer")
is_lomo_available = _installed("lomo_optim")
is_boto3_available = _installed("boto3")
is_pynvml_available = _installed("pynvml")


def _device(name: str) -> Callable[..., bool]:
    """An `is_<name>_available()` for a device type torch knows only through an extension (torch.<name>)."""

    def available(*args: Any, **kwargs: Any) -> bool:
        module = getattr(torch, name, None)
        return module is not None and bool(module.is_available())

    available.__doc__ = f"True when a `{name}` device can be used (accel does not train on it; Accelerate's check)."
    return available


is_mlu_available = _device("mlu")
is_musa_available = _device("musa")
is_sdaa_available = _device("sdaa")
is_neuron_available = _device("neuron")


def compare_versions(library_or_version: str | Any, operation: str, requirement_version: str) -> bool:
    """Compare a library's installed version (by its name) or a version with `requirement_version`.

    "accelerate" and "accel" answer with accel's version, which is the Accelerate API version accel
    implements (docs/migration.md), so that a script gating on Accelerate's version takes its modern path.

    Example:
        >>> compare_versions("accelerate", ">=", "0.16.0")
        True
    """
    from packaging.version import Version, parse

    if operation not in _COMPARISONS:
        accepted = ", ".join(_COMPARISONS)
        raise ValueError(f"compare_versions(operation={operation!r}) is not accepted; use one of {accepted}.")
    if isinstance(library_or_version, str):
        if library_or_version in ("accelerate", "accel"):
            from accel._version import __version__

            library_or_version = parse(__version__)
        else:
            import importlib.metadata

            library_or_version = parse(importlib.metadata.version(library_or_version))
    if not isinstance(library_or_version, Version):
        raise TypeError(f"compare_versions(library_or_version={library_or_version!r}): give a library name or a "
                        "packaging Version.")
    return _COMPARISONS[operation](library_or_version, parse(requirement_version))


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """1 (or True with `to_bool`) for y/yes/t/true/on/1, 0 (False) for n/no/f/false/off/0, case-insensitive (Accelerate's)."""
    lowered = value.lower()
    if lowered in ("y", "yes", "t", "true", "on", "1"):
        return True if to_bool else 1
    if lowered in ("n", "no", "f", "false", "off", "0"):
        return False if to_bool else 0
    raise ValueError(f"str_to_bool({value!r}): give one of y, yes, t, true, on, 1, n, no, f, false, off, 0.")


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """True when torch_xla is installed and, if asked, its device is a TPU (`check_is_tpu`) or a GPU
    (`check_is_gpu`), as Accelerate's answers (accel itself does not train on XLA devices)."""
    if check_is_tpu and check_is_gpu:
        raise ValueError("is_torch_xla_available: check_is_tpu and check_is_gpu cannot both be True; ask one.")
    if importlib.util.find_spec("torch_xla") is None:
        return False
    if not (check_is_tpu or check_is_gpu):
        return True
    import torch_xla.runtime as xla_runtime  # imported only when installed and asked

    return xla_runtime.device_type() in (("TPU",) if check_is_tpu else ("GPU", "CUDA"))


def is_hpu_available(init_hccl: bool = False) -> bool:
    """True when an Intel Gaudi HPU can be used."""
    hpu = getattr(torch, "hpu", None)
    return hpu is not None and bool(hpu.is_available())


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """True when bfloat16 runs here: on a CUDA GPU that supports it, and always on a CPU (where it
    may be slow without AVX512-BF16 or AMX: accel warns then)."""
    return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else True


def is_fp16_available() -> bool:
    """True: float16 runs on every device accel trains on (really autocast and loss-scaled on a CPU)."""
    return True


def is_fp8_available() -> bool:
    """True: accel's native FP8 runs on any device (the CUDA libraries te/msamp/ao have their own checks)."""
    return True
