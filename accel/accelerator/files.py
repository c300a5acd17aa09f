"""The Accelerator's files: the user's model back, model files, `save`, and checkpoints with their hooks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from accel import checkpointing
from accel._validation import check_bool
from accel._warnings import warn_once
from accel.backends.base import PrecisionBackend
from accel.checkpointing.model_files import parse_size, write_model_files, write_object
from accel.checkpointing.safetensors_io import require_safetensors_writer
from accel.parallel.strategy import ParallelStrategy
from accel.quantization import Quantizer
from accel.training import model as model_utils
from accel.training.prepared import LoadHook, PreparedObjects, SaveHook


class FilesMixin:
    """unwrap_model, get_state_dict, save_model, save, save_state/load_state and their hooks."""

    precision: PrecisionBackend
    quantizer: Quantizer | None
    is_main_process: bool
    prepared: PreparedObjects
    strategy: ParallelStrategy
    project_configuration: checkpointing.ProjectConfiguration

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> nn.Module:
        """The user's model from a prepared one: without DDP (or DeepSpeed's engine), and, if asked,
        without torch.compile or the precision's forward wrapper.

        Under FSDP2 the model is sharded in place, so it is given back as it is (its parameters are
        shards; `get_state_dict` gathers full weights).

        Args:
            model: A prepared model.
            keep_fp32_wrapper: False removes the precision's forward wrapper (the autocast around
                the forward of fp16/bf16 mixed) from the model itself; True (default) keeps it.
            keep_torch_compile: True (default): a compiled model is given back compiled (around the
                model inside DDP when prepare compiled over DDP); False: the model inside.

        Returns:
            Your model.

        Example:
            ```python
            model = accelerator.prepare(model)
            plain = accelerator.unwrap_model(model)  # your nn.Module: no DDP "module." prefix, your own attributes
            torch.save(plain.state_dict(), "weights.pt")
            ```
        """
        return model_utils.unwrap_model(model, keep_fp32_wrapper=keep_fp32_wrapper, keep_torch_compile=keep_torch_compile)

    def get_state_dict(self, model: nn.Module, unwrap: bool = True, dequantize: bool = False) -> dict[str, torch.Tensor]:
        """The model's weights under their original names, in high precision.

        Under FSDP2 the shards are gathered: every process must call it, and the main process gets
        the full weights. Weights offloaded by Accelerate's big-model dispatch are read back.

        Args:
            model: A prepared (or plain) model.
            unwrap: True (default) unwraps the model first (`unwrap_model`, without torch.compile),
                so the names are your model's own.
            dequantize: For layers quantized by `BitsandbytesKwargs`: False (default) gives them as
                stored (packed, with their quant state); True gives plain weights.

        Returns:
            A state dict of tensors.
        """
        if unwrap:
            model = self.unwrap_model(model, keep_torch_compile=False)
        if dequantize and self.quantizer is not None:
            # sharded by FSDP: gathered first (every process must call), then dequantized on the main process
            gathered = self.strategy.full_state_dict(model) if self.strategy.shards_parameters else None
            return self.quantizer.model_state_dict(model, dequantize=True, gathered=gathered)
        if _dispatched_by_accelerate(model):
            # weights offloaded to the CPU or disk by Accelerate's dispatch_model/load_checkpoint_and_dispatch
            # sit on the meta device; Accelerate's own helper loads them back one module at a time
            from accel.utils.modeling import get_state_dict_offloaded_model

            return get_state_dict_offloaded_model(model)
        return self.strategy.full_state_dict(model)  # sharded: every process must call it, the main one gets them

    def save_model(
        self,
        model: nn.Module,
        save_directory: str | Path,
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> list[Path]:
        """Write the model's weights into `save_directory` (main process only); return the files.

        `model.safetensors`, or shards of at most `max_shard_size` with `model.safetensors.index.json`
        (what transformers and Accelerate read). `safe_serialization=False` writes
        `pytorch_model.bin` (or its shards and index) holding plain tensors only, so that
        `torch.load(path, weights_only=True)` reads it. Tied weights are written once. Every process
        must call it (sharded weights are gathered first).

        Args:
            model: A prepared (or plain) model.
            save_directory: The folder to write into (created if missing; a file there raises).
            max_shard_size: The largest shard, in bytes or as a size string (`"10GB"`, `"500MB"`).
            safe_serialization: True (default): safetensors; False: `pytorch_model.bin`.

        Returns:
            The files written (on the main process; an empty list elsewhere).
        """
        limit = parse_size("save_model(max_shard_size)", max_shard_size)
        directory = _folder("save_model(save_directory)", save_directory)
        if safe_serialization:
            require_safetensors_writer("save_model")  # numpy, which safetensors writes through
        state_dict = self.get_state_dict(model)
        if not self.is_main_process:
            return []
        directory.mkdir(parents=True, exist_ok=True)
        return write_model_files(state_dict, directory, limit, bool(safe_serialization))

    def save(self, obj: Any, f: str | Path, safe_serialization: bool = False) -> None:
        """Save `obj` to `f` on the main process only (Accelerate's `save`).

        Args:
            obj: What to save (with `safe_serialization=True`, a dict of tensors).
            f: The file path.
            safe_serialization: False (default): `torch.save`; True: a safetensors file.
        """
        if self.is_main_process:
            write_object(obj, f, safe_serialization)

    def save_state(
        self,
        output_dir: str | Path | None = None,
        safe_serialization: bool = True,
        async_save: bool | None = None,
        **save_model_func_kwargs: Any,
    ) -> Path:
        """Write a checkpoint of everything needed to resume exactly; returns its folder.

        Without `output_dir`, writes `project_dir/checkpoints/checkpoint_<n>` (see docs/checkpoints.md).
        `async_save=True` (default: ProjectConfiguration.async_save) copies the state to CPU memory and
        writes it in the background: `save_state(async_save=True)`; the next save_state, load_state or
        end_training waits for it and raises its error.
        Checkpoints are always safetensors plus weights-only tensors: with `safe_serialization=False`
        a warning says so and the checkpoint is written the same way; Accelerate's
        `save_model_func_kwargs`, which accel has no use for, are refused.

        A checkpoint holds every prepared model, optimizer, scheduler and dataloader position, the
        precision's state (fp16's loss scale), each process's random states and the objects given to
        `register_for_checkpointing`. Every process must call it.

        Args:
            output_dir: The folder to write; None: the next automatic checkpoint under `project_dir`
                (raises without a project_dir or with `automatic_checkpoint_naming=False`).
            safe_serialization: Accepted for Accelerate's signature; anything but True warns (see above).
            async_save: True writes in the background, False now; None: the project configuration's
                `async_save` (`ACCEL_ASYNC_SAVE`, else False).
            **save_model_func_kwargs: Accelerate's options for writing the model; refused with ValueError.

        Returns:
            The checkpoint's folder.

        Example:
            ```python
            accelerator = Accelerator(project_dir="runs/demo")
            model, optimizer = accelerator.prepare(model, optimizer)
            folder = accelerator.save_state()  # runs/demo/checkpoints/checkpoint_0
            ```
        """
        if save_model_func_kwargs:
            raise ValueError(
                f"save_state({', '.join(f'{k}={v!r}' for k, v in save_model_func_kwargs.items())}): accel takes no "
                "options for writing the model into a checkpoint. Drop these arguments."
            )
        if safe_serialization is not True:
            warn_once(
                f"save_state(safe_serialization={safe_serialization!r}): accel checkpoints are always safetensors "
                "and weights-only tensors, never pickles; the checkpoint is written that way.",
                category=UserWarning,
            )
        config = self.project_configuration.async_save
        background = config if async_save is None else check_bool("save_state(async_save)", async_save)
        return checkpointing.save_state(self, output_dir, background)  # type: ignore[arg-type]  # self: the Accelerator, a CheckpointHost

    def load_state(
        self, input_dir: str | Path | None = None, load_kwargs: dict[str, Any] | None = None, **load_model_func_kwargs: Any
    ) -> Path:
        """Restore a checkpoint written by `save_state`; returns its folder.

        Without `input_dir`, loads the newest complete checkpoint under `project_dir/checkpoints`.
        Accelerate's `load_kwargs` (for torch.load) and `load_model_func_kwargs` are refused when
        given: accel reads weights-only files onto each object's own device.

        Prepare (and register) the same objects, in the same order, as when saving; every process
        must call it. Training then continues exactly where it stopped (docs/checkpoints.md).

        Args:
            input_dir: The checkpoint folder; None: the newest complete one under `project_dir`.
            load_kwargs: Accelerate's options for torch.load; refused with ValueError when given.
            **load_model_func_kwargs: Accelerate's options for loading the model; refused with ValueError.

        Returns:
            The checkpoint's folder.

        Example:
            ```python
            accelerator = Accelerator(project_dir="runs/demo")
            model, optimizer = accelerator.prepare(model, optimizer)
            accelerator.load_state()  # the newest checkpoint under runs/demo/checkpoints
            ```
        """
        given = {**({"load_kwargs": load_kwargs} if load_kwargs else {}), **load_model_func_kwargs}
        if given:
            raise ValueError(
                f"load_state got {sorted(given)}: accel restores its checkpoints exactly and takes "
                "no options for loading the model (a strict load always). Drop these arguments."
            )
        return checkpointing.load_state(self, input_dir)  # type: ignore[arg-type]  # self: the Accelerator, a CheckpointHost

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Add objects with `state_dict()`/`load_state_dict()` to what checkpoints save and restore.

        Args:
            *objects: Objects of the script's own (an EMA model, a progress counter...); one without
                both methods raises.
        """
        self.prepared.registered.extend(checkpointing.check_registrable(objects))

    def register_save_state_pre_hook(self, hook: SaveHook) -> RemovableHandle:
        """Call `hook(models, weights, output_dir)` before each checkpoint is written (main process).

        A hook may save models itself into `output_dir` and remove their entries from `weights`,
        so that accel does not write them.

        Args:
            hook: A function `hook(models, weights, output_dir)`.

        Returns:
            A handle whose `remove()` unregisters it.
        """
        return _register(self.prepared.save_hooks, hook, "register_save_state_pre_hook")

    def register_load_state_pre_hook(self, hook: LoadHook) -> RemovableHandle:
        """Call `hook(models, input_dir)` before each checkpoint is restored (every process).

        A hook may load models itself and remove them from `models`, so that accel does not.

        Args:
            hook: A function `hook(models, input_dir)`.

        Returns:
            A handle whose `remove()` unregisters it.
        """
        return _register(self.prepared.load_hooks, hook, "register_load_state_pre_hook")


def _register(hooks: dict[int, Any], hook: Callable[..., None], method: str) -> RemovableHandle:
    if not callable(hook):
        raise TypeError(f"{method}(hook={hook!r}): give a function (see the method's docstring for its arguments).")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def _folder(argument: str, path: str | Path) -> Path:
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{argument}={str(directory)!r}: that path is a file, not a folder.")
    return directory


def _dispatched_by_accelerate(model: nn.Module) -> bool:
    """True when Accelerate's big-model hooks offload some of `model`'s weights (they are then on the meta device)."""
    return any(getattr(getattr(module, "_hf_hook", None), "offload", False) for module in model.modules()) or any(
        hasattr(module, "_hf_hook") and any(p.device.type == "meta" for p in module.parameters(recurse=False))
        for module in model.modules()
    )
