"""Writing a model's weights as safetensors."""

from __future__ import annotations

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
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / WEIGHTS_NAME
    save_file(without_shared(state_dict), str(path), metadata={"format": "pt"})
    return path


def without_shared(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop every tensor that views the same memory as one already kept; make the rest contiguous."""
    kept: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int, tuple[int, ...], torch.dtype]] = set()
    for name, tensor in state_dict.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.dtype)
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        kept[name] = tensor.detach().contiguous()
    return kept
