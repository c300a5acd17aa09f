"""The process's random number generators: Python's, numpy's global one, torch's CPU and CUDA.

States are stored as tensors and plain numbers, so that torch.load(weights_only=True) reads them.
"""

from __future__ import annotations

import importlib
import random
import warnings
from typing import Any

import torch


def capture_rng() -> dict[str, Any]:
    """The current state of every generator a training loop commonly draws from."""
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss_next": gauss_next},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = _numpy()
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = {
            "kind": str(kind),
            "keys": torch.from_numpy(keys.astype("int64")),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back what `capture_rng` returned (a generator missing here is skipped with a warning)."""
    python = state["python"]
    random.setstate((python["version"], tuple(python["state"].tolist()), python["gauss_next"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        _restore_cuda(state["cuda"])
    if "numpy" in state:
        _restore_numpy(state["numpy"])


def _restore_cuda(states: list[torch.Tensor]) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() != len(states):
        warnings.warn(
            f"load_state: the checkpoint holds the CUDA RNG state of {len(states)} GPU(s), but this process sees "
            f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}; CUDA random numbers will differ "
            "from the saved run's.",
            UserWarning,
            stacklevel=4,
        )
        return
    torch.cuda.set_rng_state_all(states)


def _restore_numpy(saved: dict[str, Any]) -> None:
    numpy = _numpy()
    if numpy is None:
        warnings.warn(
            "load_state: the checkpoint holds numpy's RNG state but numpy is not installed; skipped.",
            UserWarning,
            stacklevel=4,
        )
        return
    keys = saved["keys"].numpy().astype(numpy.uint32)
    numpy.random.set_state((saved["kind"], keys, saved["pos"], saved["has_gauss"], saved["cached_gaussian"]))


def _numpy() -> Any:
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None
