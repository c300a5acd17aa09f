"""A process group that counts every collective a run makes, per kind and bytes, and hands it to gloo.

`install()` registers the "counting" backend with torch.distributed (`dist.Backend.register_backend`) and
creates the default group with it, so that the Accelerator created next reuses that group (accel joins a
group only when none runs) and every group made from it later (DeviceMesh's HSDP groups, `new_group`)
counts too. Each group is a Python `torch.distributed.ProcessGroup` whose collective methods record the
call and run it on a gloo backend of their own; the C++ callers (DDP's reducer) reach them through torch's
Python trampoline, as `dist.all_reduce`, FSDP2's `dist.all_gather_single` and DTensor's functional
collectives do. The gloo backend is registered on the group as well (torch keeps a group's name on its
backends), so a path that reached gloo without passing through the wrapper would run uncounted: gloo numbers
every collective it runs, and `CountingGroup.unseen()` compares that number with the calls counted.

What "bytes" means, per call: the tensor this rank hands to the collective - the input of an all-reduce,
broadcast, reduce, send or recv; the output (the whole gathered tensor) of an all-gather; the input (every
rank's part) of a reduce-scatter; the input of an all-to-all. Barriers count 0 bytes.

Example (in a launched script, before the Accelerator):
    counter = install()
    accelerator = Accelerator(cpu=True)
    ...
    counter.take()  # [Record("all_reduce", 4096, (0, 1)), ...] since the last take, then cleared
"""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

BACKEND = "counting"


@dataclass(frozen=True)
class Record:
    """One collective call on this rank: its kind, its bytes (see the module's docstring), its group's ranks."""

    kind: str
    bytes: int
    ranks: tuple[int, ...]


class Counter:
    """The calls every counting group of this process made, in order; thread-safe (DDP's reducer may call
    from autograd's threads)."""

    def __init__(self) -> None:
        self._records: list[Record] = []
        self._lock = threading.Lock()

    def add(self, record: Record) -> None:
        """Keep one call."""
        with self._lock:
            self._records.append(record)

    def take(self) -> list[Record]:
        """The calls since the last take (or since install), then forget them."""
        with self._lock:
            taken, self._records = self._records, []
        return taken


COUNTER = Counter()
GROUPS: list[CountingGroup] = []


def _bytes(tensors: Iterable[Any]) -> int:
    """Bytes of tensors, nested in lists any depth."""
    total = 0
    for item in tensors:
        if isinstance(item, torch.Tensor):
            total += item.numel() * item.element_size()
        else:
            total += _bytes(item)
    return total


class CountingGroup(dist.ProcessGroup):
    """A process group that records each collective (kind, bytes, the group's ranks) and runs it on gloo."""

    def __init__(self, gloo: Any, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self._gloo = gloo
        self._calls = 0
        self._lock = threading.Lock()
        self._ranks: tuple[int, ...] = ()
        self._start = gloo._get_sequence_number_for_group()
        # gloo registered too, for what torch keeps on a group's backend (its name); every collective method is
        # overridden below, and `unseen` tells whether gloo ran one that did not pass through them
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
        GROUPS.append(self)

    def _count(self, kind: str, tensors: Iterable[Any]) -> None:
        with self._lock:
            self._calls += 1
            if not self._ranks:  # known once torch registered the group, after __init__
                self._ranks = tuple(dist.get_process_group_ranks(self))
        COUNTER.add(Record(kind, _bytes(tensors), self._ranks))

    def unseen(self) -> int:
        """How many collectives gloo ran on this group that were not counted (gloo numbers each one)."""
        return self._gloo._get_sequence_number_for_group() - self._start - self._calls

    def getBackendName(self) -> str:  # noqa: N802  # torch's name
        return BACKEND

    # all-reduce and the other reductions: the input
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._count("all_reduce", tensors)
        return self._gloo.allreduce(tensors, opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._count("all_reduce", tensors)
        return self._gloo.allreduce_coalesced(tensors, opts or dist.AllreduceCoalescedOptions())

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._count("reduce", tensors)
        return self._gloo.reduce(tensors, opts or dist.ReduceOptions())

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._count("broadcast", tensors)
        return self._gloo.broadcast(tensors, opts or dist.BroadcastOptions())

    # all-gather: the output, every rank's part
    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._count("all_gather", outputs)
        return self._gloo.allgather(outputs, inputs, opts or dist.AllgatherOptions())

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> Any:
        self._count("all_gather", outputs)
        return self._gloo.allgather_coalesced(outputs, inputs, opts or dist.AllgatherOptions())

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:  # noqa: A002
        self._count("all_gather", [output])
        return self._gloo._allgather_base(output, input, opts or dist.AllgatherOptions())

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        self._count("all_gather", outputs)
        return self._gloo.allgather_into_tensor_coalesced(outputs, inputs, opts or dist.AllgatherOptions())

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    # reduce-scatter: the input, every rank's part
    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        self._count("reduce_scatter", inputs)
        return self._gloo.reduce_scatter(outputs, inputs, opts or dist.ReduceScatterOptions())

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:  # noqa: A002
        self._count("reduce_scatter", [input])
        return self._gloo._reduce_scatter_base(output, input, opts or dist.ReduceScatterOptions())

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        self._count("reduce_scatter", inputs)
        return self._gloo.reduce_scatter_tensor_coalesced(outputs, inputs, opts or dist.ReduceScatterOptions())

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # the rest: the input (gather, all-to-all, send) or the output (scatter, recv)
    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._count("gather", inputs)
        return self._gloo.gather(outputs, inputs, opts or dist.GatherOptions())

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        self._count("scatter", outputs)
        return self._gloo.scatter(outputs, inputs, opts or dist.ScatterOptions())

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._count("all_to_all", inputs)
        return self._gloo.alltoall(outputs, inputs, opts or dist.AllToAllOptions())

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],  # noqa: A002
                          input_splits: list[int], opts: Any = None) -> Any:
        self._count("all_to_all", [input])
        return self._gloo.alltoall_base(output, input, output_splits, input_splits, opts or dist.AllToAllOptions())

    alltoall_base = all_to_all_single

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> Any:
        self._count("send", tensors)
        return self._gloo.send(tensors, dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> Any:
        self._count("recv", tensors)
        return self._gloo.recv(tensors, src, tag)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> Any:
        self._count("recv", tensors)
        return self._gloo.recv_anysource(tensors, tag)

    def barrier(self, opts: Any = None) -> Any:
        self._count("barrier", [])
        return self._gloo.barrier(opts or dist.BarrierOptions())

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> Any:
        self._count("barrier", [])
        return self._gloo.monitored_barrier(timeout, wait_all_ranks)


def _create(store: dist.Store, rank: int, size: int, timeout: datetime.timedelta) -> CountingGroup:
    return CountingGroup(dist.ProcessGroupGloo(store, rank, size, timeout), rank, size)


def install() -> Counter:
    """Register the counting backend and create the default group with it, from torchrun's environment
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); the counter its groups record into."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
    dist.init_process_group(BACKEND, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    COUNTER.take()
    return COUNTER
