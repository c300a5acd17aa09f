"""Gradient synchronisation and agreement between processes: `no_sync`, `trigger_sync_in_backward`,
`join_uneven_inputs`, the `set_trigger`/`check_trigger` flag, and `profile` (Accelerate's names
and meanings)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.join import Join, Joinable

from accel.distributed import operations
from accel.distributed.process_state import ProcessState
from accel.kwargs_handlers import Handlers, ProfileKwargs
from accel.parallel.strategy import ParallelStrategy
from accel.training.compiling import is_compiled
from accel.training.prepared import PreparedObjects


class SyncMixin:
    """Synchronisation helpers; in one process each is a no-op (nothing to synchronise with)."""

    process_state: ProcessState
    handlers: Handlers
    prepared: PreparedObjects
    strategy: ParallelStrategy
    _trigger: torch.Tensor | None

    def no_sync(self, model: nn.Module) -> AbstractContextManager[Any]:
        """Skip DDP's gradient all-reduce (FSDP's reduce-scatter) inside the block (nothing to skip in one process).

        `accumulate` does this for you; use `no_sync` to decide yourself which micro-batches sync.

        Args:
            model: A prepared model (compiled or not).

        Returns:
            A context manager.
        """
        return self.strategy.no_sync(_uncompiled(model))

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: nn.Module) -> Iterator[None]:
        """Make the next backward of `model` all-reduce its gradients even inside `no_sync`/`accumulate`.

        Args:
            model: A prepared model; only a DDP-wrapped one has anything to do (elsewhere a no-op).
        """
        model = _uncompiled(model)
        if not isinstance(model, nn.parallel.DistributedDataParallel):
            yield
            return
        before = (model.require_backward_grad_sync, model.require_forward_param_sync)
        model.require_backward_grad_sync = model.require_forward_param_sync = True
        model.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = before

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: Sequence[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Let processes with fewer batches finish while the others go on (torch's `Join`).

        `joinables` are the prepared DDP models (and optimizers that are Joinable); in one process
        this does nothing. `even_batches` overrides the prepared dataloaders' setting inside the
        block (False: no sample is repeated to even out the processes' batches).

        Args:
            joinables: The prepared models (and Joinable optimizers); anything not torch `Joinable`
                raises TypeError in several processes.
            even_batches: Overrides the prepared dataloaders' `even_batches` inside the block; None
                leaves it.
        """
        with contextlib.ExitStack() as stack:
            if even_batches is not None:
                for loader in self.prepared.dataloaders:
                    stack.enter_context(loader.override_even_batches(even_batches))
            if self.process_state.distributed:
                members = [j for j in joinables if isinstance(j, Joinable)]
                if len(members) != len(joinables):
                    others = [type(j).__name__ for j in joinables if not isinstance(j, Joinable)]
                    raise TypeError(
                        f"join_uneven_inputs: {others} cannot join (not torch Joinable); pass the prepared models "
                        "(DistributedDataParallel) and optimizers such as ZeroRedundancyOptimizer."
                    )
                stack.enter_context(Join(members))
            yield

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[torch.profiler.profile]:
        """torch.profiler over the block, with the options of `profile_handler` (else the
        ProfileKwargs given to the Accelerator); each process writes its Chrome trace to
        `output_trace_dir/profile_<process>.json` (Accelerate's name) when one is set, and the
        processes then wait for each other, so that every trace exists when the block is left.

        Args:
            profile_handler: The profiler's options for this block; None: the Accelerator's
                `ProfileKwargs`, else the defaults.

        Returns:
            A context manager yielding the `torch.profiler.profile`.
        """
        options = profile_handler if profile_handler is not None else self.handlers.get(ProfileKwargs)
        with options.build(self.process_state.device) as profiler:
            yield profiler
        if options.output_trace_dir is not None:
            folder = Path(options.output_trace_dir)
            folder.mkdir(parents=True, exist_ok=True)
            profiler.export_chrome_trace(str(folder / f"profile_{self.process_state.process_index}.json"))
            operations.barrier(self.process_state)

    def set_trigger(self) -> None:
        """Raise this process's flag; the next `check_trigger()` returns True on every process."""
        self._trigger = torch.ones((), device=self.process_state.device)

    def check_trigger(self) -> bool:
        """True on every process when any process called `set_trigger()` since the last check (which
        lowers the flag). Every process must call it: it is one all-reduce."""
        flag = self._trigger if self._trigger is not None else torch.zeros((), device=self.process_state.device)
        raised = bool(operations.reduce(flag, self.process_state, "sum", check_shapes=False).item() >= 1)
        if raised:
            self._trigger = None
        return raised


def _uncompiled(model: nn.Module) -> nn.Module:
    """The module inside torch.compile's wrapper (prepare compiles over DDP), else `model`."""
    return model._orig_mod if is_compiled(model) else model  # type: ignore[return-value]  # _orig_mod: a Module
