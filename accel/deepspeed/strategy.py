"""DeepSpeedStrategy: prepared models run inside DeepSpeed's engine (ZeRO 0-3) instead of DDP or FSDP2.

The model, its optimizer and scheduler are prepared in one call and handed to `deepspeed.initialize`
(prepare.py) with the config config.py builds. `accelerator.backward` runs the engine's backward and, on the
micro-batch that syncs, its step (clipping, optimizer, scheduler, zeroing): the prepared optimizer's and
scheduler's own steps do nothing (engine.py). Checkpoints are DeepSpeed's (checkpoint.py), in `shards/`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from accel.backends.deepspeed import DeepSpeedPrecision
from accel.deepspeed import checkpoint
from accel.deepspeed.engine import DeepSpeedEngineWrapper
from accel.deepspeed.plugin import DeepSpeedPlugin
from accel.distributed.process_state import ProcessState
from accel.kwargs_handlers import Handlers
from accel.parallel.strategy import ParallelStrategy

if TYPE_CHECKING:
    from pathlib import Path

    from accel.checkpointing.host import CheckpointHost
    from accel.checkpointing.manifest import Manifest
    from accel.training.gradient_state import GradientState


class DeepSpeedStrategy(ParallelStrategy):
    """DeepSpeed's engine with the plugin's ZeRO stage and offloading (docs/deepspeed.md)."""

    name: ClassVar[str] = "deepspeed"
    shards_parameters: ClassVar[bool] = True
    prepares_together: ClassVar[bool] = True

    def __init__(
        self, process_state: ProcessState, precision: DeepSpeedPrecision, handlers: Handlers, plugin: DeepSpeedPlugin
    ) -> None:
        super().__init__(process_state, precision, handlers)
        self.plugin = plugin
        self.precision: DeepSpeedPrecision = precision
        self.engine: DeepSpeedEngineWrapper | None = None
        """The engine of the prepared model (one per Accelerator, as in Accelerate), None before prepare."""
        self.config: dict[str, Any] | None = None
        """The config the engine was built with (Accelerate's `accelerator.deepspeed_config`)."""
        self.mpu: Any = None
        """With DeepSpeed's Ulysses (sp_backend 'deepspeed'): its groups, from accel.deepspeed.ulysses.register."""

    @property
    def sharded_checkpoints(self) -> bool:
        return True

    def checkpoint_record(self) -> dict[str, Any]:
        """The manifest's `fsdp` field: a sharded checkpoint, written by DeepSpeed at this stage."""
        return {"state_dict_type": "SHARDED_STATE_DICT", "engine": checkpoint.ENGINE, "zero_stage": self.plugin.zero_stage}

    # ----------------------------------------------------------------- prepare
    def prepare_objects(self, accelerator: Any, objects: Sequence[Any], placements: Sequence[bool | None]) -> list[Any]:
        """The model, optimizer and scheduler through `deepspeed.initialize`; dataloaders as everywhere."""
        from accel.deepspeed.prepare import prepare_objects

        return prepare_objects(self, accelerator, objects, placements)

    # ----------------------------------------------------------------- training step
    def backward(self, loss: torch.Tensor, gradient_state: GradientState, **kwargs: Any) -> None:
        """The engine's backward (it divides by the accumulation steps) and, on a syncing micro-batch, its step."""
        engine = self.engine
        if engine is None:
            raise RuntimeError("backward() under DeepSpeed before a model was prepared with its optimizer: "
                               "call accelerator.prepare(model, optimizer, dataloader) first.")
        engine.backward(loss, sync_gradients=gradient_state.sync_gradients, **kwargs)

    def no_sync(self, model: nn.Module) -> AbstractContextManager[Any]:
        """Nothing to skip: the engine reduces gradients only where its accumulation boundary says so."""
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """The norm the engine computed at its step (it clipped there, at the config's gradient_clipping).

        Clipping at another norm is refused, naming both: the engine has already stepped, so the script's
        limit could not apply. Set DeepSpeedPlugin(gradient_clipping=max_norm) (or the JSON's)."""
        config = self.config or {}
        clipping = float(config.get("gradient_clipping", 0.0))
        if float(max_norm) != clipping or norm_type != 2.0:
            raise ValueError(
                f"clip_grad_norm_(max_norm={max_norm}, norm_type={norm_type}) under DeepSpeed, whose engine clips "
                f"inside its step at gradient_clipping={clipping} (0: none), 2-norm. Give "
                f"DeepSpeedPlugin(gradient_clipping={max_norm}) (or \"gradient_clipping\": {max_norm} in the JSON) "
                "so the engine clips as the script asks."
            )
        norm = self.engine.get_global_grad_norm() if self.engine is not None else None
        return torch.tensor(float("nan") if norm is None else float(norm))

    # ----------------------------------------------------------------- weights
    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole weights (gathered under ZeRO 3: every process must call it), as the engine holds them."""
        return checkpoint.full_weights(self._engine_of(model), self.plugin.zero_stage == 3)

    def load_full_weights(self, model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
        """Full weights into the engine's model (under ZeRO 3 each process keeps its partition)."""
        checkpoint.load_full_weights(self._engine_of(model), weights, self.plugin.zero_stage == 3)

    # ----------------------------------------------------------------- checkpoints (DeepSpeed's own shards)
    def write_shards(self, accelerator: CheckpointHost, folder: Path) -> dict[str, int]:
        return checkpoint.write(self._engine("save_state"), folder, self.process_state.process_index,
                                self.checkpoint_record())

    def shard_problems(
        self, accelerator: CheckpointHost, folder: Path, manifest: Manifest, models: list[int], label: str
    ) -> list[str]:
        return checkpoint.problems(manifest, self.checkpoint_record(), self.process_state.num_processes)

    def read_shards(self, accelerator: CheckpointHost, folder: Path, models: list[int], label: str) -> dict[str, Any]:
        return {"folder": folder}

    def apply_shards(self, accelerator: CheckpointHost, state: dict[str, Any], models: list[int]) -> None:
        checkpoint.load(self._engine("load_state"), state["folder"])

    def _engine_of(self, model: nn.Module) -> nn.Module:
        """The engine running `model` (given as the engine or as the model inside it), else `model` itself."""
        engine = None if self.engine is None else self.engine.engine
        return engine if engine is not None and model in (engine, engine.module) else model

    def _engine(self, what: str) -> Any:
        if self.engine is None:
            raise RuntimeError(f"{what} under DeepSpeed before a model was prepared: prepare the model first.")
        return self.engine.engine
