"""What this machine has and can run, with the reason when it cannot: for the wizard, launch and `accel env`.

Every function here imports torch lazily, so that importing this module stays cheap.
`fp8_backend_status` asks the FP8 backends' own capability checks, so the wizard and `accel env`
offer exactly what the Accelerator would run.
"""

from __future__ import annotations

import glob
import os
import platform
import sys
from typing import Any

_GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")
"""Device files present where a CUDA (NVIDIA), ROCm or WSL GPU can be seen."""
FP8_BACKEND_NAMES = ("native", "te", "ao", "msamp")
"""FP8 backends in the order the wizard lists them (the runnable one first)."""


def gpu_count() -> int:
    """How many CUDA GPUs this process sees (respects CUDA_VISIBLE_DEVICES); 0 without CUDA.

    On Linux without a GPU device file (NVIDIA's, ROCm's or WSL's) the answer is 0 without importing
    torch, which `accel launch` would otherwise pay for once more before its processes import it.
    """
    if sys.platform.startswith("linux") and not any(glob.glob(pattern) for pattern in _GPU_DEVICE_FILES):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cpu_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def gpu_descriptions() -> list[str]:
    """One line per visible CUDA GPU: index, name, compute capability and memory."""
    import torch

    lines = []
    for index in range(gpu_count()):
        props: Any = torch.cuda.get_device_properties(index)
        lines.append(f"cuda:{index} {props.name}, compute capability {props.major}.{props.minor}, "
                     f"{props.total_memory / 2**30:.1f} GiB")
    return lines


def fp8_backend_status(device: Any = None) -> dict[str, str | None]:
    """FP8 backend -> None when it can run on `device` (default: the training device), else why not.

    The backends' own capability checks (accel.backends.fp8.choice.fp8_backend_status), which the
    Accelerator also runs when it is built: the wizard and `accel env` say what it would.
    """
    from accel.backends.fp8.choice import fp8_backend_status as backend_status

    status = backend_status(training_device() if device is None else device)
    return {name: status[name] for name in FP8_BACKEND_NAMES}


def fp8_backend_note(name: str) -> str | None:
    """What users should know about FP8 backend `name` before choosing it (msamp: unmaintained upstream), or None."""
    if name != "msamp":
        return None
    from accel.backends.fp8.msamp import UNMAINTAINED

    return UNMAINTAINED


def training_device(use_cpu: bool = False, gpu_ids: str = "all") -> Any:
    """The device a launched script trains on here: the first GPU chosen (by `gpu_ids`), or the CPU
    (asked for, or no GPU)."""
    import torch

    if use_cpu or not gpu_count():
        return torch.device("cpu")
    return torch.device("cuda", 0 if gpu_ids == "all" else int(gpu_ids.split(",")[0]))


def precision_status(device: Any) -> dict[str, str | None]:
    """Precision -> None when its backend can be built on `device`, else why not (the backend's own error)."""
    from accel.backends.names import CANONICAL_PRECISIONS
    from accel.kwargs_handlers import Handlers

    return {name: backend_problem(name, device, Handlers()) for name in CANONICAL_PRECISIONS}


BACKEND_REFUSALS = (NotImplementedError, RuntimeError, ValueError, TypeError, ImportError)
"""What a precision backend raises when it is built for something it cannot run."""


def backend_problem(precision: str, device: Any, handlers: Any) -> str | None:
    """Why the backend of `precision` with `handlers` (an FP8 recipe, say) cannot be built on `device`;
    None when it can. Its slowness warnings are not shown: callers say that in their own words."""
    from accel._warnings import collect_precision_warnings
    from accel.backends.registry import create_backend

    with collect_precision_warnings():
        try:
            create_backend(precision, device, handlers)
        except BACKEND_REFUSALS as error:
            return str(error)
    return None


def speed_note(precision: str, device: Any) -> str | None:
    """Why `precision` is slow on `device` (no native matrix instructions for its compute dtype, or for
    FP8 its default base precision's), or None."""
    from accel._warnings import collect_precision_warnings
    from accel.backends.capability import slow_dtype_reason
    from accel.backends.registry import create_backend
    from accel.kwargs_handlers import Handlers

    with collect_precision_warnings():
        try:
            backend = create_backend(precision, device, Handlers())
        except BACKEND_REFUSALS:
            return None
    base = getattr(backend, "base", None)  # FP8: what runs outside the FP8 GEMMs decides the speed
    return slow_dtype_reason(device, base.compute_dtype if base is not None else backend.compute_dtype)


def recipe_problem(recipe: Any, device: Any) -> str | None:
    """Why mixed_precision fp8 with the FP8RecipeKwargs `recipe` cannot run on `device`, or None.

    The FP8 backend's own construction-time checks (backend, scaling, fields it cannot honour,
    base precision), as `accel launch` passes the recipe: the wizard offers what this accepts.
    """
    from accel.kwargs_handlers import Handlers

    return backend_problem("fp8", device, Handlers().with_environment(recipe))
