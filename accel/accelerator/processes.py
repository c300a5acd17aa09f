"""The Accelerator's view of the processes: where this one stands, collectives, and helpers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from accel.accelerator import operations
from accel.accelerator.data import PreparedDataLoader
from accel.accelerator.state import ProcessState


class ProcessMixin:
    """Process properties and collectives; one process (no process group) makes each a no-op."""

    state: ProcessState
    _dataloaders: list[PreparedDataLoader]

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

    def gather(self, tensor: Any) -> Any:
        """Every process's tensors (a tensor or a nested tuple/list/dict of them), concatenated
        along the first dimension in process order; the input itself in a single process."""
        return operations.gather(tensor, self.state)

    def reduce(self, tensor: Any, reduction: str = "sum") -> Any:
        """Each tensor summed (`"sum"`) or averaged (`"mean"`) over the processes, as new tensors."""
        return operations.reduce(tensor, self.state, reduction)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """`gather`, without the samples that padding repeated in the last batch of an epoch.

        Data other than tensors (or with `use_gather_object=True`) is gathered as Python objects:
        a list from each process is concatenated into one list.
        """
        keep = next((d.gathered_rows_to_keep() for d in reversed(self._dataloaders) if d.ending), None)
        return operations.gather_for_metrics(input_data, self.state, keep, use_gather_object)

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this call (nothing to wait for in one process)."""
        operations.barrier(self.state)

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on the others (say, to download or cache data once)."""
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

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: `function` runs on the main process only (elsewhere the call returns None)."""
        return function if self.is_main_process else _skipped

    def on_local_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: `function` runs on each machine's first process only (elsewhere it returns None)."""
        return function if self.is_local_main_process else _skipped

    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on the main process only."""
        if self.is_main_process:
            print(*args, **kwargs)


def _skipped(*args: Any, **kwargs: Any) -> None:
    """What an `on_main_process` function is on the other processes."""
