"""Local SGD (Accelerate's `accelerate.local_sgd.LocalSGD`): each process takes `local_sgd_steps`
optimizer steps on its own, without DDP's gradient all-reduce, then the processes average their
parameters. Fewer collectives per step, for the price of processes drifting apart in between.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Protocol

import torch

from accel.distributed import operations
from accel.distributed.process_state import ProcessState
from accel.distributed.types import DistributedType


class Accelerator(Protocol):
    """What LocalSGD uses of an Accelerator (this folder does not import the Accelerator)."""

    process_state: ProcessState

    @property
    def distributed_type(self) -> DistributedType: ...

    @property
    def num_processes(self) -> int: ...

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[Any]: ...

    def wait_for_everyone(self) -> None: ...


class LocalSGD:
    """Context manager: inside it a prepared model trains without gradient synchronization; every
    `local_sgd_steps`-th `step()` and on leaving the block, its parameters are averaged over the
    processes. Does nothing when `enabled` is False or in one process (as Accelerate's).

    Example:
        >>> with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=8) as local_sgd:  # doctest: +SKIP
        ...     for batch in train_dataloader:
        ...         with accelerator.accumulate(model):
        ...             accelerator.backward(model(**batch).loss)
        ...             optimizer.step()
        ...             optimizer.zero_grad()
        ...             local_sgd.step()
    """

    def __init__(self, accelerator: Accelerator, model: torch.nn.Module, local_sgd_steps: int, enabled: bool = True) -> None:
        if isinstance(local_sgd_steps, bool) or not isinstance(local_sgd_steps, int) or local_sgd_steps < 1:
            raise ValueError(
                f"LocalSGD(local_sgd_steps={local_sgd_steps!r}) is not accepted: give the number of optimizer steps "
                "between two averagings of the parameters, an int >= 1."
            )
        if not isinstance(enabled, bool):
            raise TypeError(f"LocalSGD(enabled={enabled!r}) is not accepted: give True or False.")
        distributed_type = accelerator.distributed_type
        if distributed_type == DistributedType.FSDP:
            raise NotImplementedError(
                "LocalSGD with FSDP is not supported (as in Accelerate): each process holds only a shard of the "
                "parameters. Use it with DDP (no fsdp_plugin), or drop LocalSGD."
            )
        self.enabled = enabled and distributed_type != DistributedType.NO and accelerator.num_processes > 1
        """False: `step()` only counts (disabled by the caller, or a single process)."""
        self.num_steps = 0
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self._no_sync: Any = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = self.accelerator.no_sync(self.model)
            self._no_sync.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self.enabled:
            try:
                if kind is None:  # an exception on one process must not leave the others waiting in a collective
                    self._sync_and_avg_model_params()
            finally:
                self._no_sync.__exit__(kind, value, tb)
                self._no_sync = None

    def step(self) -> None:
        """Count one optimizer step; every `local_sgd_steps`-th one averages the parameters over the processes."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._sync_and_avg_model_params()

    @torch.no_grad()
    def _sync_and_avg_model_params(self) -> None:
        """Replace every parameter, in place, by its mean over the processes (after a barrier, as Accelerate)."""
        self.accelerator.wait_for_everyone()
        tensors = [parameter.data for parameter in self.model.parameters()]
        averaged = operations.reduce(tensors, self.accelerator.process_state, "mean", check_shapes=False)
        for tensor, mean in zip(tensors, averaged):
            tensor.copy_(mean)


__all__ = ["LocalSGD"]
