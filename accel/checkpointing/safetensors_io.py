"""Writing a model's weights as safetensors, and what that needs installed."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
from safetensors.torch import save_file

WEIGHTS_NAME = "model.safetensors"


def save_weights(state_dict: dict[str, torch.Tensor], directory: str | Path) -> Path:
    """Write `state_dict` to `directory/model.safetensors`; return the file's path.

    Tensors that share memory (tied weights) are written once, under their first name;
    `safetensors.torch.load_model(model, path)` restores the ties when loading.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"save_model(save_directory={str(directory)!r}): that path is a file, not a folder.")
    require_safetensors_writer("save_model")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / WEIGHTS_NAME
    save_file(without_shared(state_dict), str(path), metadata={"format": "pt"})
    return path


def without_shared(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop every tensor that views the same memory as one already kept; make the rest contiguous."""
    kept: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int | torch.SymInt, tuple[int, ...], torch.dtype]] = set()
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.dtype)
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        kept[name] = tensor.detach().contiguous()
    return kept


def require_safetensors_writer(caller: str) -> None:
    """Raise ImportError, before anything is written, when safetensors cannot write tensors here.

    safetensors.torch.save_file hands each tensor's bytes to its writer through a numpy array, so
    writing needs numpy (loading does not). accel declares numpy as a dependency; this names it
    when an environment lacks it anyway, instead of failing midway through a save.
    """
    try:
        importlib.import_module("numpy")
    except ImportError as error:
        raise ImportError(
            f"{caller} writes safetensors files, and safetensors.torch writes tensors through numpy, which "
            f"cannot be imported here ({error}). accel depends on numpy: install it with `pip install numpy` "
            "(or reinstall accel, which installs it)."
        ) from error
