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
        """This process's index among all processes, 0 to `num_processes - 1` (torchrun's RANK; 0 in one process)."""
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        """This process's index on its machine (torchrun's LOCAL_RANK; 0 in one process)."""
        return self.state.local_process_index

    @property
    def num_processes(self) -> int:
        """How many processes train together (torchrun's WORLD_SIZE; 1 without a launcher)."""
        return self.state.num_processes

    @property
    def is_main_process(self) -> bool:
        """True on process 0 of the whole run: the one that logs, prints and writes model files."""
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """True on each machine's first process (local index 0)."""
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """True on the process with the highest index (the only one in one process)."""
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
        """Every process's tensors, concatenated along the first dimension in process order.

        Every process must call it, with tensors of the same shape but the first dimension (pad them
        with `pad_across_processes` otherwise). For metrics over a prepared dataloader use
        `gather_for_metrics`, which drops the samples repeated to even out the last batch.

        Args:
            tensor: A tensor, or a nested tuple/list/dict of them.

        Returns:
            The same nesting, each tensor gathered; the input itself in a single process.
        """
        return operations.gather(tensor, self.process_state)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Each tensor reduced over the processes, on every process.

        Args:
            tensor: A tensor, or a nested tuple/list/dict of them (every process gives the same shapes).
            reduction: `"sum"` (default), `"mean"`, `"max"` or `"min"`.
            scale: A factor the result is multiplied by (Accelerate's argument; 1.0 leaves it).

        Returns:
            New tensors, in the input's nesting.
        """
        reduced = operations.reduce(tensor, self.process_state, reduction)
        return reduced if scale == 1.0 else operations.rebuild(reduced, [t * scale for t in operations.tensors_of(reduced)])

    def broadcast(self, tensor: Any, from_process: int = 0) -> Any:
        """The tensors of one process, on every process.

        Args:
            tensor: A tensor, or a nested tuple/list/dict of them, of the same shapes on every process.
            from_process: The index of the process whose values everyone gets; default 0.

        Returns:
            Process `from_process`'s tensors, in the input's nesting.
        """
        return operations.broadcast(tensor, self.process_state, from_process)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
        """Pad each tensor along `dim` to the largest size any process has, so that they can be gathered.

        Args:
            tensor: A tensor, or a nested tuple/list/dict of them.
            dim: The dimension to pad; default 0.
            pad_index: The value the padding is filled with; default 0.
            pad_first: True pads before the data (for left-padded sequences); default after.

        Returns:
            The padded tensors, in the input's nesting.
        """
        return pad_across_processes(tensor, self.process_state, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """`gather`, cut at the last batch of a prepared dataloader's epoch to its real samples (Accelerate's
        rule, in one process too: the first `gradient_state.remainder` rows, when it is above 0).

        Data other than tensors (or with `use_gather_object=True`) is gathered as Python objects: each
        process's (a list, say) is iterated and the items joined into one list; in one process it stays as is.

        Args:
            input_data: This process's predictions, labels or losses for the current batch: a tensor,
                a nested tuple/list/dict of them, or Python objects.
            use_gather_object: True gathers Python objects (pickled) even for tensors.

        Returns:
            Every process's data for this batch, without the samples repeated to even out the last one.

        Example:
            ```python
            model, eval_loader = accelerator.prepare(model, eval_loader)
            predictions, targets = [], []
            for x, y in eval_loader:
                with torch.no_grad():
                    out = model(x)
                out, y = accelerator.gather_for_metrics((out, y))  # every process's, padding dropped
                predictions.append(out)
                targets.append(y)
            ```

            One process, 10 samples in batches of 4: on the last batch,
            `accelerator.gather_for_metrics(loss.repeat(4))` has 2 rows.
        """
        active = self.gradient_state.active_dataloader
        keep = active.gathered_rows_to_keep() if active is not None else None
        return operations.gather_for_metrics(input_data, self.process_state, keep, use_gather_object)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (nothing to wait for in one process).

        Every process must call it, or the others wait until the process group's timeout
        (`InitProcessGroupKwargs(timeout=...)`).

        Example:
            ```python
            accelerator.wait_for_everyone()  # every process has finished training
            accelerator.save_model(model, "final")  # the main process writes the gathered weights
            ```
        """
        operations.barrier(self.process_state)

    # ----------------------------------------------------------------- running code on some processes
    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others (say, to download or cache data once).

        Every process must enter it: the others wait at its start for the main process to finish the block.

        Example:
            ```python
            with accelerator.main_process_first():
                dataset = load_or_build_cached_dataset()  # built once, then read from the cache
            ```
        """
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

        Args:
            inputs: A list, tuple, tensor (split along its first dimension), or a dict of them (each value split).
            apply_padding: True pads the shorter shares with their last element.

        Returns:
            A context manager yielding this process's share.
        """
        return self.state.split_between_processes(inputs, apply_padding)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on the main process only (elsewhere a call returns None).

        Args:
            function: The function to decorate (`@accelerator.on_main_process`).
        """
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on each machine's first process only (elsewhere a call returns None).

        Args:
            function: The function to decorate.
        """
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: `function` runs on the last process only (elsewhere a call returns None).

        Args:
            function: The function to decorate.
        """
        return self.state.on_last_process(function)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None) -> Any:
        """Decorator (`@accelerator.on_process(process_index=1)`): `function` runs on that process only.

        Args:
            function: The function to decorate (None when used as `@accelerator.on_process(process_index=...)`).
            process_index: The index of the process that runs it.
        """
        return self.state.on_process(function, process_index)

    def on_local_process(self, function: Callable[..., Any] | None = None, local_process_index: int | None = None) -> Any:
        """Decorator: `function` runs on the process with that local index on each machine.

        Args:
            function: The function to decorate (None when used as `@accelerator.on_local_process(local_process_index=...)`).
            local_process_index: The local index of the process that runs it on each machine.
        """
        return self.state.on_local_process(function, local_process_index)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on the main process only.

        Args:
            *args: What to print, as for print().
            **kwargs: print()'s keywords (`sep`, `end`, `file`, `flush`).
        """
        if self.is_main_process:
            print(*args, **kwargs)
