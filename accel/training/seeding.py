"""`set_seed`: seed every random number generator a training script draws from (Accelerate's function)."""

from __future__ import annotations

import os
import random

import torch

from accel.distributed.process_group import read_layout


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


def synchronize_rng_states(rng_types: list[str], generator: torch.Generator | None = None) -> None:
    """Give every process the random state of process 0 for each of `rng_types` ("torch", "cuda",
    "generator" with `generator`); nothing to do in one process. accel's prepared dataloaders do
    not need this (they share each epoch's order by construction): it is here for scripts."""
    from accel.distributed import operations
    from accel.distributed.partial_state import current_process_state

    state = current_process_state()
    for name in rng_types:
        if name == "torch":
            torch.set_rng_state(operations.broadcast(torch.get_rng_state(), state))
        elif name == "cuda" and torch.cuda.is_available():
            torch.cuda.set_rng_state(operations.broadcast(torch.cuda.get_rng_state(), state))
        elif name == "generator" and generator is not None:
            generator.set_state(operations.broadcast(generator.get_state(), state))
        elif name not in ("cuda", "generator"):
            raise ValueError(f"synchronize_rng_states: unknown rng type {name!r}; accepted: torch, cuda, generator.")
