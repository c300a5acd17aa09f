"""What this machine has and can run, with the reason when it cannot: for the wizard, launch and `accel env`.

Every function here imports torch lazily, so that importing this module stays cheap.
`fp8_backend_status` is the one place that decides which FP8 backends are offered; replace its
body with the adapters' own capability checks when they land.
"""

from __future__ import annotations

import importlib.util
import os
import platform
from typing import Any

FP8_BACKEND_NAMES = ("native", "te", "ao", "msamp")
"""FP8 backends in the order the wizard lists them (the runnable one first)."""
_NOT_YET = "not implemented in this version of accel"
_FP8_CAPABILITY = (8, 9)


def gpu_count() -> int:
    """How many CUDA GPUs this process sees (respects CUDA_VISIBLE_DEVICES); 0 without CUDA."""
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


def _fp8_gpu_present() -> bool:
    import torch

    return any(torch.cuda.get_device_capability(i) >= _FP8_CAPABILITY for i in range(gpu_count()))


def fp8_backend_status() -> dict[str, str | None]:
    """FP8 backend -> None when it can run here, else the reason it cannot (shown by the wizard and `accel env`)."""
    fp8_gpu = _fp8_gpu_present()
    gpu_note = "" if fp8_gpu else "; it also needs a CUDA GPU with compute capability >= 8.9 (none here)"
    cuda_note = "" if gpu_count() else "; it also needs a CUDA GPU (none here)"
    ao_note = "" if importlib.util.find_spec("torchao") else "; it also needs torchao (not installed)"
    return {
        "native": None,
        "te": f"TransformerEngine: {_NOT_YET}{gpu_note}",
        "ao": f"torchao: {_NOT_YET}{ao_note}",
        "msamp": f"MS-AMP: {_NOT_YET}{cuda_note}",
    }


def training_device(use_cpu: bool = False) -> Any:
    """The device a launched script trains on here: the first GPU, or the CPU (asked for, or no GPU)."""
    import torch

    return torch.device("cuda", 0) if gpu_count() and not use_cpu else torch.device("cpu")


def precision_status(device: Any) -> dict[str, str | None]:
    """Precision -> None when its backend can be built on `device`, else why not (the backend's own error)."""
    from accel.backends.names import CANONICAL_PRECISIONS
    from accel.backends.registry import create_backend
    from accel.kwargs_handlers import Handlers

    status: dict[str, str | None] = {}
    for name in CANONICAL_PRECISIONS:
        try:
            create_backend(name, device, Handlers())
        except (NotImplementedError, RuntimeError, ValueError, ImportError) as error:
            status[name] = str(error)
        else:
            status[name] = None
    return status


def speed_note(precision: str, device: Any) -> str | None:
    """Why `precision` is slow on `device` (no native matrix instructions for its compute dtype), or None."""
    from accel.backends.capability import slow_dtype_reason
    from accel.backends.registry import create_backend
    from accel.kwargs_handlers import Handlers

    try:
        backend = create_backend(precision, device, Handlers())
    except (NotImplementedError, RuntimeError, ValueError, ImportError):
        return None
    return slow_dtype_reason(device, backend.compute_dtype)
