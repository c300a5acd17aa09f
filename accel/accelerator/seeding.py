"""`set_seed`: seed every random number generator a training script draws from (Accelerate's function)."""

from __future__ import annotations

import os
import random

import torch

from accel.accelerator.distributed import read_layout


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's `random`, NumPy's global generator (when NumPy is installed) and torch's
    generators on every device with `seed`.

    `device_specific=True` adds this process's index (from torchrun's environment) to the seed,
    so that each process draws different numbers. `deterministic=True` makes torch use
    deterministic algorithms (`torch.use_deterministic_algorithms(True)`, which can be slower),
    and sets CUBLAS_WORKSPACE_CONFIG when unset, which cuBLAS needs for that on CUDA.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"set_seed(seed={seed!r}) is not accepted: give an int.")
    if device_specific:
        seed += read_layout(os.environ).rank
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # every device's generator, CUDA's included
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
