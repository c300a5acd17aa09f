"""The files of a checkpoint folder written by Hugging Face Accelerate's `save_state`, and how each
is read without running code.

Accelerate writes (for the i-th object, `_<i>` after the stem from the second one on):

* `model.safetensors` (`pytorch_model.bin` with `safe_serialization=False`): the prepared model's
  state_dict, under DDP with its `module.` prefix (ties written once in the safetensors file);
* `optimizer.bin`, `scheduler.bin`, `custom_checkpoint_<i>.pkl`: torch.save of state_dicts;
* `scaler.pt`: the fp16 GradScaler's state_dict (only where Accelerate scales the loss: on a GPU);
* `random_states_<rank>.pkl`: each process's RNG states, numpy's as a numpy array, and the
  accumulation counter `step`;
* `sampler.bin` / `dl_state_dict.bin`: a pickled sampler object, or torchdata's StatefulDataLoader
  position (only with `use_stateful_dataloader=True`).

Every file is read by torch.load(weights_only=True); the RNG file may name four numpy types and
functions (`RNG_GLOBALS`), allowed for that one load. Anything else is refused unrun.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from accel.checkpointing.errors import CheckpointError
from accel.checkpointing.serialization import load_tensors, load_torch

SAFE_MODEL = "model"
PICKLED_MODEL = "pytorch_model"
OPTIMIZER = "optimizer"
SCHEDULER = "scheduler"
SCALER = "scaler.pt"
SAMPLER = "sampler"
STATEFUL_LOADER = "dl_state_dict"
CUSTOM = re.compile(r"custom_checkpoint_(\d+)\.pkl")
RNG = re.compile(r"random_states_(\d+)\.pkl")

MARKERS = ("optimizer.bin", "scheduler.bin", "pytorch_model.bin", "scaler.pt", "custom_checkpoint_0.pkl")
"""File names only Accelerate's save_state writes (with `random_states_<rank>.pkl`)."""

_SHARDED = ("pytorch_model_fsdp_0", "optimizer_0", "pytorch_model_fsdp.bin", "model_0")
"""What Accelerate writes for a sharded model (FSDP, DeepSpeed) instead of `model.safetensors`."""


def indexed(stem: str, index: int, suffix: str) -> str:
    """Accelerate's name for object `index`: `stem.suffix`, then `stem_1.suffix`, ..."""
    return f"{stem}{suffix}" if index == 0 else f"{stem}_{index}{suffix}"


def is_accelerate_checkpoint(folder: Path) -> bool:
    """True when `folder` holds the files of Accelerate's save_state (and no accel manifest)."""
    if not folder.is_dir():
        return False
    names = {entry.name for entry in folder.iterdir()}
    return any(name in names for name in MARKERS) or any(RNG.fullmatch(name) for name in names)


def refuse_unsupported_layout(folder: Path, label: str) -> None:
    """Raise CheckpointError for what Accelerate writes that accel does not read: sharded models
    (FSDP/DeepSpeed folders), a pickled sampler, torchdata's StatefulDataLoader state."""
    names = sorted(entry.name for entry in folder.iterdir())
    sharded = [name for name in names if name in _SHARDED or name.startswith(("pytorch_model_fsdp", "optimizer_0"))]
    if sharded and not any(name.startswith(SAFE_MODEL) or name.startswith(f"{PICKLED_MODEL}.") for name in names):
        raise CheckpointError(
            f"{label}: an Accelerate checkpoint of a sharded model (it holds {', '.join(sharded)}), saved by "
            "Accelerate's FSDP or DeepSpeed. accel resumes Accelerate checkpoints of whole models only. Load the "
            "weights with Accelerate's tools, or resume this run under Accelerate."
        )
    for name in names:
        if name.startswith(f"{SAMPLER}") and name.endswith(".bin"):
            raise CheckpointError(
                f"{label}: {name} is a pickled sampler object (Accelerate saves one for a seedable sampler over an "
                "iterable dataset); rebuilding it would run code from the file, which accel never does. Delete "
                f"{name} to resume without it (the sampler then starts as a new one)."
            )
        if name.startswith(STATEFUL_LOADER) and name.endswith(".bin"):
            raise CheckpointError(
                f"{label}: {name} is the position of torchdata's StatefulDataLoader "
                "(use_stateful_dataloader=True), a format accel does not read. Delete it to resume with the "
                "dataloader at the start of its epoch (skip_first_batches can skip what was done)."
            )


def model_weights(folder: Path, index: int, label: str) -> tuple[str, dict[str, Any]]:
    """(file name, tensors) of model `index`: its safetensors file, else its torch.save file."""
    safe = indexed(SAFE_MODEL, index, ".safetensors")
    if (folder / safe).is_file():
        return safe, load_tensors(folder / safe, label)
    pickled = indexed(PICKLED_MODEL, index, ".bin")
    if (folder / pickled).is_file():
        weights = read(folder, pickled, label)
        if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
            raise CheckpointError(f"{label}: {pickled} is not a model state_dict (names to tensors).")
        return pickled, weights
    raise CheckpointError(
        f"{label}: it holds neither {safe} nor {pickled}, the weights of prepared model {index}. Prepare the same "
        "models as the run that saved it (or load this model in a load_state pre-hook)."
    )


def read(folder: Path, name: str, label: str, allowed: tuple[Any, ...] = ()) -> Any:
    """torch.load(weights_only=True) of Accelerate's file `name` (with `allowed` globals for this load)."""
    path = folder / name
    if not path.is_file():
        raise CheckpointError(f"{label}: {name} is missing; Accelerate's save_state writes it for this setup.")
    return load_torch(path, label, allowed, refused=_REFUSED)


_REFUSED = (
    "Accelerate writes tensors, numbers and strings there; a file naming other objects was written by something "
    "else, or holds a state_dict with Python objects of its own, and loading it could run any code. accel never "
    "loads such a file unsafely: make the state_dict() plain (tensors, numbers, strings) and save again, or do not "
    "trust this checkpoint."
)


def checkpoint_number(folder: Path) -> int | None:
    """n for a folder named `checkpoint_<n>` (Accelerate's automatic naming), else None."""
    match = re.fullmatch(r"checkpoint_(\d+)", folder.name)
    return int(match.group(1)) if match else None


def rng_globals() -> tuple[Any, ...]:
    """The numpy names Accelerate's RNG file holds (numpy's MT19937 state is a uint32 array):
    the array class, its rebuilding function, `numpy.dtype` and the uint32 dtype's class."""
    import numpy

    core = getattr(numpy, "_core", None) or numpy.core  # numpy 2 renamed numpy.core
    return (numpy.ndarray, core.multiarray._reconstruct, numpy.dtype, type(numpy.dtype(numpy.uint32)))


def rng_state(folder: Path, rank: int, label: str) -> tuple[dict[str, Any], int] | None:
    """Process `rank`'s RNG states in accel's form (see rng.capture_rng) and Accelerate's step
    counter, from `random_states_<rank>.pkl`; None when the folder has no such file."""
    name = f"random_states_{rank}.pkl"
    if not (folder / name).is_file():
        return None
    saved = read(folder, name, label, rng_globals())
    try:
        version, internal, gauss_next = saved["random_state"]
        state: dict[str, Any] = {
            "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss_next": gauss_next},
            "torch": saved["torch_manual_seed"],
        }
        kind, keys, pos, has_gauss, cached = saved["numpy_random_seed"]
        state["numpy"] = {"kind": str(kind), "keys": torch.from_numpy(keys.astype("int64")), "pos": int(pos),
                          "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
        if "torch_cuda_manual_seed" in saved:
            state["cuda"] = list(saved["torch_cuda_manual_seed"])
        step = int(saved.get("step", 0))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{label}: {name} is not Accelerate's RNG file ({type(exc).__name__}: {exc}).") from exc
    if not isinstance(state["torch"], torch.Tensor):
        raise CheckpointError(f"{label}: {name} is not Accelerate's RNG file (its torch state is not a tensor).")
    return state, step
