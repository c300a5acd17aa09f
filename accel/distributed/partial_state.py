"""`PartialState` and `AcceleratorState`: Accelerate's process-control objects, without a singleton.

What inference and data-preparation scripts use, with Accelerate's names and meanings:
`PartialState().split_between_processes(...)`, `.process_index`, `.is_main_process`,
`.main_process_first()`, `.wait_for_everyone()`, the `on_*_process` decorators, `.print()`.

Accelerate keeps one shared state per process (a Borg singleton). accel keeps none beyond the
torch.distributed process group (see process_group.py): each `PartialState()` reads torchrun's
environment and joins the process group, or reuses the one that runs, so `PartialState()` and
any number of Accelerators, created in any order, agree on the layout and share one group.
What that changes for a script, compared with Accelerate:

* A `PartialState` knows only what the environment and the process group say. Options given to
  an Accelerator's constructor (`cpu=True`, `mixed_precision="bf16"`) are not seen by a
  `PartialState()` or `AcceleratorState()` created elsewhere; `accelerator.state` has them.
  (When the running group is CPU-only, gloo, the device is the CPU, as the Accelerator chose.)
* `AcceleratorState()` may be created before any Accelerator (Accelerate raises then): its
  `mixed_precision` is the argument, else `$ACCEL_MIXED_PRECISION`, else "no".
* `PartialState._reset_state()` / `AcceleratorState._reset_state(reset_partial_state=False)` (what
  scripts and test suites call between runs) empty every live state of that kind, as Accelerate's
  clear its shared state: reading one afterwards (`accelerator.num_processes` included) raises an
  AttributeError that says so, `initialized` turns False, and `accel.state.is_initialized()` is
  False until the next Accelerator. The next `Accelerator()` / `PartialState()` starts fresh (it
  always does: nothing is carried from one state to the next).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from accel.distributed import operations, splitting
from accel.distributed.process_state import ProcessState
from accel.distributed.run_where import chosen_index, run_where
from accel.distributed.state_lifetime import empty, register, rejoin
from accel.distributed.types import DistributedType, distributed_type_of
from accel.kwargs_handlers import InitProcessGroupKwargs

_ACCELERATOR_BACKENDS = ("nccl", "xccl")


def current_process_state(cpu: bool = False, **group_options: Any) -> ProcessState:
    """This process's state from torchrun's environment, joining (or reusing) the process group.

    `cpu` or `$ACCEL_USE_CPU` puts the process on the CPU, as does a running CPU-only (gloo)
    group; `group_options` are InitProcessGroupKwargs fields (backend, init_method, timeout).
    """
    from accel.settings import USE_CPU

    running = str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else None
    cpu_only_group = running is not None and not any(name in running for name in _ACCELERATOR_BACKENDS)
    use_cpu = bool(cpu) or bool(USE_CPU.from_env()) or cpu_only_group
    group = InitProcessGroupKwargs(**group_options) if group_options else None
    return ProcessState.from_environment(cpu=use_cpu, group=group)


class PartialState:
    """Where this process stands among the processes of the run, and helpers to coordinate them.

    Reads torchrun's environment (one process without it) and joins the process group, or reuses the
    one that runs; no state is shared between instances beyond that group (see the module docstring
    for what differs from Accelerate's singleton).

    Args:
        cpu: True puts this process on the CPU (as do `ACCEL_USE_CPU` and a running CPU-only, gloo,
            process group); False: the first accelerator, else the CPU.
        **kwargs: InitProcessGroupKwargs fields (`backend`, `init_method`, `timeout`), used when this
            call creates the process group, as in Accelerate
            (`PartialState(**InitProcessGroupKwargs(...).to_kwargs())`).
    """

    kind = "partial"
    """Which states a reset empties and a kept state rejoins (accel.distributed.state_lifetime)."""

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self._process = current_process_state(cpu, **kwargs)
        register(self)

    @classmethod
    def of(cls, process: ProcessState) -> PartialState:
        """The state for a ProcessState already made (an Accelerator's), reading nothing else.

        Args:
            process: The ProcessState to wrap.
        """
        state = cls.__new__(cls)
        state._process = process
        register(state)
        return state

    # ------------------------------------------------------------------ where this process stands
    @property
    def process_state(self) -> ProcessState:
        """accel's ProcessState underneath (what the collective operations take)."""
        return self._process

    @property
    def device(self) -> torch.device:
        """This process's device, named as Accelerate names it (`cpu:0` on each process of a multi-CPU run)."""
        return self._process.public_device

    @property
    def process_index(self) -> int:
        """This process's index among all processes (torchrun's RANK; 0 in one process)."""
        return self._process.process_index

    @property
    def local_process_index(self) -> int:
        """This process's index on its machine (torchrun's LOCAL_RANK; 0 in one process)."""
        return self._process.local_process_index

    @property
    def num_processes(self) -> int:
        """How many processes run together (torchrun's WORLD_SIZE; 1 without a launcher)."""
        return self._process.num_processes

    @property
    def num_local_processes(self) -> int:
        """Processes on this machine."""
        return self._process.num_local_processes

    @property
    def backend(self) -> str | None:
        """The process group's backend (gloo, nccl, ...); None in a single process."""
        return self._process.backend

    @property
    def distributed_type(self) -> DistributedType:
        """FSDP when models are sharded; else NO in a single process, MULTI_CPU, MULTI_GPU, ... by the device."""
        if getattr(self, "fsdp_plugin", None) is not None:
            return DistributedType.FSDP
        if getattr(self, "deepspeed_plugin", None) is not None:
            return DistributedType.DEEPSPEED
        return distributed_type_of(self._process)

    @property
    def distributed(self) -> bool:
        """True when several processes run together (ProcessState's name)."""
        return self._process.distributed

    @property
    def use_distributed(self) -> bool:
        """True when several processes run together (Accelerate's name)."""
        return self._process.distributed

    @property
    def initialized(self) -> bool:
        """False after `_reset_state()` emptied this state, until a state of its kind is created again
        (as Accelerate's emptied, then refilled, singleton)."""
        return "_process" in self.__dict__ or rejoin(self)

    @property
    def is_main_process(self) -> bool:
        """True on process 0 of the whole run."""
        return self._process.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """True on each machine's first process (local index 0)."""
        return self._process.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """True on the process with the highest index (the only one in one process)."""
        return self._process.is_last_process

    @property
    def default_device(self) -> torch.device:
        """The device a process would use with no CPU option: the first accelerator, else the CPU."""
        accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        return torch.device(accelerator.type if accelerator is not None else "cpu")

    # ------------------------------------------------------------------ coordination
    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (nothing to wait for in one process)."""
        operations.barrier(self._process)

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others."""
        with self._first(self.is_main_process):
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each machine's first process first, then on that machine's others."""
        with self._first(self.is_local_main_process):
            yield

    @contextlib.contextmanager
    def _first(self, leading: bool) -> Iterator[None]:
        if not leading:
            self.wait_for_everyone()
        yield
        if leading:
            self.wait_for_everyone()

    def split_between_processes(
        self, inputs: Any, apply_padding: bool = False
    ) -> contextlib.AbstractContextManager[Any]:
        """Context manager yielding this process's share of a list, tuple, tensor or dict (see splitting.py).

        Shares are contiguous and differ in size by at most one.

        Args:
            inputs: A list, tuple, tensor (split along its first dimension), or a dict of them (each value split).
            apply_padding: True repeats the last element so that every share has the same size.
        """
        return splitting.split_between_processes(inputs, self._process, apply_padding)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on each machine's first process only (Accelerate's PartialState.print; `Accelerator.print`
        prints on the main process only).

        Args:
            *args: What to print, as for print().
            **kwargs: print()'s keywords (`sep`, `end`, `file`, `flush`).
        """
        if self.is_local_main_process:
            print(*args, **kwargs)

    # ------------------------------------------------------------------ decorators
    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on the main process only; elsewhere a call returns None.

        Args:
            function: The function to decorate.
        """
        return run_where(function, self.is_main_process)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on each machine's first process only (elsewhere a call returns None).

        Args:
            function: The function to decorate.
        """
        return run_where(function, self.is_local_main_process)

    def on_last_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on the last process only (elsewhere a call returns None).

        Args:
            function: The function to decorate.
        """
        return run_where(function, self.is_last_process)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None) -> Any:
        """Decorator (`@state.on_process(process_index=2)`): `function` runs on that process only.

        Args:
            function: The function to decorate (None when used as `@state.on_process(process_index=...)`).
            process_index: The index of the process that runs it.
        """
        return run_where(function, self.process_index == chosen_index("process_index", process_index))

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Any:
        """Decorator: `function` runs on the process of that local index on each machine.

        Args:
            function: The function to decorate (None when used as `@state.on_local_process(local_process_index=...)`).
            local_process_index: The local index of the process that runs it on each machine.
        """
        here = self.local_process_index == chosen_index("local_process_index", local_process_index)
        return run_where(function, here)

    # ------------------------------------------------------------------ Accelerate's housekeeping
    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy `group`, or the process group accel created when None (Accelerate's method).

        Args:
            group: A torch.distributed process group; None: accel's.
        """
        from accel.distributed import process_group as distributed

        if group is not None:
            dist.destroy_process_group(group)
        else:
            distributed.leave_process_group()

    @staticmethod
    def _reset_state() -> None:
        """Empty every live PartialState (not the AcceleratorStates, as in Accelerate): reading one
        afterwards raises an AttributeError naming this call; the next `PartialState()` starts fresh.

        Example:
            >>> state = PartialState()
            >>> PartialState._reset_state()
            >>> state.initialized
            False
        """
        empty(lambda state: not isinstance(state, AcceleratorState))

    def check_not_reset(self) -> None:
        """Raise AttributeError, naming `_reset_state()`, when this state was emptied by it and no state of
        its kind was created since (what an Accelerator checks before preparing, as Accelerate fails there)."""
        if "_process" not in self.__dict__ and not rejoin(self):
            self.__getattr__("_process")

    def __getattr__(self, name: str) -> Any:
        # Reached only when normal lookup failed: a missing attribute, or a property of an emptied state.
        kind = type(self).__name__
        if "_process" not in self.__dict__ and not name.startswith("__"):
            if rejoin(self):
                return getattr(self, name)
            if hasattr(type(self), name) or name in ("_process", "_mixed_precision"):
                reset = "AcceleratorState" if isinstance(self, AcceleratorState) else "PartialState"
                raise AttributeError(
                    f"`{kind}` object has no attribute `{name}`. This happens if `{reset}._reset_state()` was called "
                    "and an `Accelerator` or `PartialState` was not reinitialized: create a new one after the reset."
                )
        raise AttributeError(f"'{kind}' object has no attribute '{name}'")

    def __repr__(self) -> str:
        backend = f"  Backend: {self.backend}" if self.backend else ""
        return (
            f"Distributed environment: {self.distributed_type.value}{backend}\nNum processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\nLocal process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
        )


class AcceleratorState(PartialState):
    """PartialState plus the precision (see the module docstring for what differs from Accelerate).

    `accelerator.state` is the state of that Accelerator, with its precision and plugins; an
    `AcceleratorState()` built directly knows only its arguments and the environment.

    Args:
        mixed_precision: Resolved like the Accelerator's (accel's and Lightning's spellings); None:
            `ACCEL_MIXED_PRECISION`, else "no". `mixed_precision` reports accel's canonical name.
        cpu: True puts this process on the CPU (see PartialState).
        **kwargs: InitProcessGroupKwargs fields, as for PartialState.
    """

    kind = "accelerator"
    deepspeed_plugin: Any = None
    """The DeepSpeedPlugin when the Accelerator trains through DeepSpeed, else None."""
    fsdp_plugin: Any = None
    """The FSDP plugin when the Accelerator shards with FSDP, else None."""
    dynamo_plugin: Any = None
    """torch.compile's options in force (a TorchDynamoPlugin) in an Accelerator's state, else None."""

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False, **kwargs: Any) -> None:
        from accel.backends.names import resolve_precision
        from accel.settings import MIXED_PRECISION

        super().__init__(cpu, **kwargs)
        chosen = MIXED_PRECISION.from_env() if mixed_precision is None else mixed_precision
        self._mixed_precision = resolve_precision(chosen, "AcceleratorState(mixed_precision)")

    @classmethod
    def of(
        cls, process: ProcessState, mixed_precision: str = "no", **plugins: Any
    ) -> AcceleratorState:
        """The state of an Accelerator: its ProcessState, its canonical precision, and plugins set as attributes.

        Args:
            process: The Accelerator's ProcessState.
            mixed_precision: The canonical name of the precision that runs.
            **plugins: Attributes to set (`fsdp_plugin=...`, `deepspeed_plugin=...`, `dynamo_plugin=...`).
        """
        state = cls.__new__(cls)
        state._process = process
        state._mixed_precision = mixed_precision
        register(state)
        for name, plugin in plugins.items():
            setattr(state, name, plugin)
        return state

    @property
    def mixed_precision(self) -> str:
        """The precision that runs, by accel's canonical name ('no', 'fp16', 'bf16', 'fp8', '16-true', ...)."""
        return self._mixed_precision

    @staticmethod
    def _reset_state(reset_partial_state: bool = False) -> None:
        """Empty every live AcceleratorState (an Accelerator's `state` included), and every PartialState
        too when `reset_partial_state`; reading one afterwards raises an AttributeError naming this call.

        Example:
            >>> accelerator = Accelerator()  # doctest: +SKIP
            >>> AcceleratorState._reset_state(True)  # doctest: +SKIP
            >>> accel.state.is_initialized()  # doctest: +SKIP
            False
        """
        empty(lambda state: reset_partial_state or isinstance(state, AcceleratorState))

    def __repr__(self) -> str:
        return super().__repr__() + f"Mixed precision type: {self.mixed_precision}\n"

