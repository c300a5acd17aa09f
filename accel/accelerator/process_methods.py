"""The Accelerator's view of the processes: where this one stands, collectives, and helpers.

Each method delegates to accel.distributed.operations (the collectives) or to the Accelerator's
`state` (an AcceleratorState, the same object a script gets from `PartialState()`), so that the
Accelerator and PartialState behave alike by construction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from accel.data.loader import PreparedDataLoader
from accel.distributed import operations
from accel.distributed.padding import pad_across_processes
from accel.distributed.partial_state import AcceleratorState
from accel.distributed.process_state import ProcessState
from accel.distributed.types import DistributedType
from accel.training.gradient_state import GradientState


class ProcessMixin:
    """Process properties and collectives; one process (no process group) makes each a no-op.

    Where this process stands is read from `state`, so that after `AcceleratorState._reset_state()`
    they raise, naming the reset, as Accelerate's do.
    """

    process_state: ProcessState
    state: AcceleratorState
    _dataloaders: list[PreparedDataLoader]
    gradient_state: GradientState

    # ----------------------------------------------------------------- where this process stands
    @property
    def process_index(self) -> int:
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        return self.state.local_process_index

    @property
    def num_processes(self) -> int:
        return self.state.num_processes

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        return self.state.is_last_process

    @property
    def use_distributed(self) -> bool:
        """True when several processes train together."""
        return self.state.use_distributed

    @property
    def distributed_type(self) -> DistributedType:
        """NO in one process, else MULTI_CPU, MULTI_GPU, ... by the device (Accelerate's enum)."""
        return self.state.distributed_type

    @property
    def is_fsdp2(self) -> bool:
        """True when prepared models are sharded with FSDP2 (accel's only FSDP), as Accelerate's property.

        >>> Accelerator(cpu=True).is_fsdp2
        False
        """
        return self.distributed_type == DistributedType.FSDP

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        """Accelerate's name for `is_fsdp2`."""
        return self.is_fsdp2

    # ----------------------------------------------------------------- collectives
    def gather(self, tensor: Any) -> Any:
        """Every process's tensors (a tensor or a nested tuple/list/dict of them), concatenated
        along the first dimension in process order; the input itself in a single process."""
        return operations.gather(tensor, self.process_state)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Each tensor reduced over the processes: "sum", "mean", "max" or "min" (new tensors),
        then multiplied by `scale` (Accelerate's argument; 1.0 leaves it)."""
        reduced = operations.reduce(tensor, self.process_state, reduction)
        return reduced if scale == 1.0 else operations.rebuild(reduced, [t * scale for t in operations.tensors_of(reduced)])

    def broadcast(self, tensor: Any, from_process: int = 0) -> Any:
        """The tensors of process `from_process`, on every process (same nesting as the input)."""
        return operations.broadcast(tensor, self.process_state, from_process)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
        """Pad each tensor along `dim` to the largest size any process has, so they can be gathered."""
        return pad_across_processes(tensor, self.process_state, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """`gather`, cut at the last batch of a prepared dataloader's epoch to its real samples (Accelerate's
        rule, in one process too: the first `gradient_state.remainder` rows, when it is above 0).

        Data other than tensors (or with `use_gather_object=True`) is gathered as Python objects: each
        process's (a list, say) is iterated and the items joined into one list; in one process it stays as is.

        Example: one process, 10 samples in batches of 4: on the last batch,
        `accelerator.gather_for_metrics(loss.repeat(4))` has 2 rows.
        """
        active = self.gradient_state.active_dataloader
        keep = active.gathered_rows_to_keep() if active is not None else None
        return operations.gather_for_metrics(input_data, self.process_state, keep, use_gather_object)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (nothing to wait for in one process)."""
        operations.barrier(self.process_state)

    # ----------------------------------------------------------------- running code on some processes
    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others (say, to download or cache data once)."""
        with self.state.main_process_first():
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each machine's first process first, then on that machine's others."""
        with self.state.local_main_process_first():
            yield

    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> contextlib.AbstractContextManager[Any]:
        """Context manager yielding this process's share of a list, tuple, tensor or dict of them.

        Shares are contiguous and differ in size by at most one; `apply_padding=True` repeats the
        last element so that every share has the same size (gather, then drop the extras).
        """
        return self.state.split_between_processes(inputs, apply_padding)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on the main process only (elsewhere a call returns None)."""
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on each machine's first process only."""
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on the last process only."""
        return self.state.on_last_process(function)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None) -> Any:
        """Decorator (`@accelerator.on_process(process_index=1)`): `function` runs on that process only."""
        return self.state.on_process(function, process_index)

    def on_local_process(self, function: Callable[..., Any] | None = None, local_process_index: int | None = None) -> Any:
        """Decorator: `function` runs on the process with that local index on each machine."""
        return self.state.on_local_process(function, local_process_index)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on the main process only."""
        if self.is_main_process:
            print(*args, **kwargs)
