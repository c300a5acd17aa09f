"""Small helpers scripts import from `accelerate.utils`: `extract_model_from_parallel`, `save`, `tqdm`
(and `check_os_kernel`, at Accelerate's `accelerate.utils.other` path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from accel.checkpointing.model_files import write_object
from accel.distributed.partial_state import PartialState
from accel.training import model as model_utils
from accel.utils.environment import check_os_kernel

__all__ = ["check_os_kernel", "extract_model_from_parallel", "save", "tqdm"]


def extract_model_from_parallel(
    model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
) -> nn.Module:
    """The user's model without DDP/DataParallel (what `accelerator.unwrap_model` returns).

    With `keep_fp32_wrapper=False`, a forward replaced by hand the way Accelerate does it (the
    original kept as `model._original_forward`, e.g. around `convert_outputs_to_fp32`) is put
    back as well, and `_original_forward` removed, as Accelerate does.
    """
    unwrapped = model_utils.unwrap_model(
        model, keep_fp32_wrapper=keep_fp32_wrapper, keep_torch_compile=keep_torch_compile
    )
    if not keep_fp32_wrapper:
        inner = getattr(unwrapped, "_orig_mod", unwrapped)
        _restore_original_forward(inner)
    return unwrapped


def _restore_original_forward(model: nn.Module) -> None:
    """Put `model._original_forward` back as its forward (deleting the instance attribute when it is
    the class's own forward, so that nothing unpicklable is left on the model)."""
    original = model.__dict__.pop("_original_forward", None)
    if original is None:
        return
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is type(model).forward:
        model.__dict__.pop("forward", None)
    else:
        model.forward = original


def save(obj: Any, f: str | Path, save_on_each_node: bool = False, safe_serialization: bool = False) -> None:
    """Save `obj` on the main process (on each machine's first with `save_on_each_node`): torch.save,
    or a safetensors file with `safe_serialization=True` (then `obj` must be a dict of tensors)."""
    state = PartialState()
    if not (state.is_local_main_process if save_on_each_node else state.is_main_process):
        return
    write_object(obj, f, safe_serialization)


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """tqdm's progress bar, shown on each machine's first process only unless `main_process_only=False`."""
    try:
        from tqdm.auto import tqdm as progress_bar
    except ImportError:
        raise ImportError("accel.utils.tqdm needs tqdm: pip install tqdm") from None
    if main_process_only and not PartialState().is_local_main_process:
        kwargs["disable"] = True
    return progress_bar(*args, **kwargs)
