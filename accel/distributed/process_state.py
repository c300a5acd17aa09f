"""Which process this is, which device it trains on, and the process group it belongs to."""

from __future__ import annotations

import dataclasses
import os

import torch

from accel.distributed import process_group as distributed
from accel.kwargs_handlers import InitProcessGroupKwargs


@dataclasses.dataclass(frozen=True)
class ProcessState:
    """The process's place in the job and its device.

    A script run without torchrun (or with WORLD_SIZE=1) is one process with no process group;
    under `accel launch --num_processes N` each process joins the group (see process_group.py).
    """

    device: torch.device
    process_index: int = 0
    local_process_index: int = 0
    num_processes: int = 1
    num_local_processes: int = 1
    """Processes on this machine."""
    backend: str | None = None
    """The process group's backend (gloo, nccl, ...); None in a single process."""
    data_parallel: tuple[int, int] | None = None
    """(size, rank) of the data-parallel world where it is not the whole world: with a device mesh whose
    tp (or cp) groups see the same batch (accel.parallel.mesh.data_parallel_place); None: every process
    reads its own part."""
    named_device: torch.device | None = None
    """The device as Accelerate names it where that differs from `device` (see accelerate_device_name); None:
    `device`. Tensors go to `device`: `.to("cpu:0")` copies a CPU tensor where `.to("cpu")` returns it."""

    @classmethod
    def from_environment(cls, *, cpu: bool, group: InitProcessGroupKwargs | None = None) -> ProcessState:
        """Read the layout torchrun set, pick the device, and join the process group when there are several."""
        layout = distributed.read_layout(os.environ)
        named = _device_from_environment(cpu)
        device = named or pick_device(cpu=cpu, local_index=layout.local_rank)
        if layout.world_size == 1:
            return cls(device=device)
        backend = distributed.join_process_group(layout, device, group or InitProcessGroupKwargs())
        return cls(device, layout.rank, layout.local_rank, layout.world_size, layout.local_world_size, backend,
                   named_device=None if named else accelerate_device_name(device))

    @property
    def distributed(self) -> bool:
        """True when several processes train together (a process group exists)."""
        return self.num_processes > 1

    @property
    def public_device(self) -> torch.device:
        """The device a script reads (Accelerator.device, PartialState.device): Accelerate's name for it."""
        return self.device if self.named_device is None else self.named_device

    @property
    def data_parallel_size(self) -> int:
        """How many parts the data is split into: the processes, or the data-parallel ranks of a mesh."""
        return self.num_processes if self.data_parallel is None else self.data_parallel[0]

    @property
    def data_parallel_index(self) -> int:
        """Which part of the data this process reads (shared by the ranks of one tensor-parallel group)."""
        return self.process_index if self.data_parallel is None else self.data_parallel[1]

    @property
    def is_main_process(self) -> bool:
        """True on the process that writes files and prints (global rank 0)."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """True on the first process of each machine."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """True on the process with the highest rank."""
        return self.process_index == self.num_processes - 1


DEVICE_VARIABLE = "ACCELERATE_TORCH_DEVICE"
"""Accelerate's variable naming this process's device outright (its PartialState reads it, as accel's does)."""


def _device_from_environment(cpu: bool) -> torch.device | None:
    """The device $ACCELERATE_TORCH_DEVICE names, or None when it is not set; a value torch cannot parse, or an
    accelerator together with cpu=True, raises ValueError naming the variable."""
    value = os.environ.get(DEVICE_VARIABLE)
    if value is None:
        return None
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as error:
        raise ValueError(
            f"{DEVICE_VARIABLE}={value!r} is not a device torch knows ({error}); give one like 'cpu', 'cuda:1' or "
            f"'xpu:0', or unset it."
        ) from None
    if cpu and device.type != "cpu":
        raise ValueError(
            f"{DEVICE_VARIABLE}={value!r} names a {device.type} device, but cpu=True (or --cpu) asks for the CPU; "
            f"unset {DEVICE_VARIABLE} or drop cpu=True."
        )
    return device


def accelerate_device_name(device: torch.device) -> torch.device | None:
    """How Accelerate 1.15 names the device `device` of a process of a multi-process run, where its name
    differs: `cpu:0` for the CPU (MULTI_CPU: PartialState.set_device takes the index local_process_index %
    torch.cpu.device_count(), and that count is 1), on every process; None otherwise (an accelerator's `cuda:<local
    rank>` is already its name). One process is `cpu` in both."""
    return torch.device("cpu", 0) if device.type == "cpu" and device.index is None else None


def pick_device(*, cpu: bool, local_index: int = 0) -> torch.device:
    """The CPU when asked or when there is no accelerator, else accelerator `local_index` of this machine."""
    if cpu or not torch.accelerator.is_available():
        return torch.device("cpu")
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None
    count = torch.accelerator.device_count()
    if local_index >= count:
        raise RuntimeError(
            f"this is process {local_index} on its machine (LOCAL_RANK={local_index}), but only {count} "
            f"{accelerator.type} device(s) are visible here. Start at most {count} processes per machine "
            "(accel launch --num_processes), or train on the CPU with --cpu."
        )
    return torch.device(accelerator.type, local_index)
