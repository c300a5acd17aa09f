"""CheckpointHost: what checkpointing reads from the object whose training state it saves and loads.

The Accelerator is the one host; checkpointing is written against this protocol instead, so that
it never imports the Accelerator nor reads its private attributes. Everything it needs is public:
the registry of prepared objects, the precision (its scaler and FP8 state), this process's place,
the gradient-accumulation state, the project's folders, the parallelism strategy (whether
checkpoints hold shards) and the two model accessors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

if TYPE_CHECKING:
    from accel.backends.base import PrecisionBackend
    from accel.checkpointing.project import ProjectConfiguration
    from accel.distributed.process_state import ProcessState
    from accel.kwargs_handlers import Handlers
    from accel.parallel.strategy import ParallelStrategy
    from accel.training.gradient_state import GradientState
    from accel.training.prepared import PreparedObjects


class CheckpointHost(Protocol):
    """The Accelerator, as checkpointing sees it."""

    @property
    def prepared(self) -> PreparedObjects:
        """The prepared models, optimizers, schedulers, dataloaders, registered objects and hooks."""

    @property
    def precision(self) -> PrecisionBackend:
        """The precision backend (its state_dict holds the loss scaler and FP8 scaling state)."""

    @property
    def handlers(self) -> Handlers:
        """The kwargs handlers in force (the FP8 recipe a checkpoint records)."""

    @property
    def process_state(self) -> ProcessState:
        """This process's rank, device and process group."""

    @property
    def gradient_state(self) -> GradientState:
        """Where the run stands in its accumulation window."""

    @property
    def project_configuration(self) -> ProjectConfiguration:
        """Where automatic checkpoints go, how many are kept, and the next one's number."""

    @property
    def strategy(self) -> ParallelStrategy:
        """How models are spread over the processes: whether checkpoints hold shards."""

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> nn.Module:
        """The user's model inside the wrappers prepare put around it."""

    def get_state_dict(self, model: nn.Module, unwrap: bool = True, dequantize: bool = False) -> dict[str, torch.Tensor]:
        """The model's weights under their original names, in high precision (gathered when sharded)."""
