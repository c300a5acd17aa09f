"""Which process this is and which device it trains on."""

from __future__ import annotations

import dataclasses
import os

import torch


@dataclasses.dataclass(frozen=True)
class ProcessState:
    """The process's place in the job and its device. A script run without torchrun is one process."""

    device: torch.device
    process_index: int = 0
    local_process_index: int = 0
    num_processes: int = 1

    @classmethod
    def from_environment(cls, *, cpu: bool) -> ProcessState:
        """Read the process layout from the environment and pick the device."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size > 1:
            raise NotImplementedError(
                f"WORLD_SIZE={world_size}: this script was started as one of {world_size} processes, but this "
                "version of accel trains in a single process only. Each process would train its own copy of the "
                "model, so accel refuses. Run the script once, without torchrun, until multi-process support lands."
            )
        return cls(device=pick_device(cpu=cpu))

    @property
    def is_main_process(self) -> bool:
        """True on the process that writes files and prints (global rank 0)."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """True on the first process of each machine."""
        return self.local_process_index == 0


def pick_device(*, cpu: bool) -> torch.device:
    """The CPU when asked or when there is no accelerator, else this process's accelerator."""
    if cpu or not torch.accelerator.is_available():
        return torch.device("cpu")
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None
    index = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device(accelerator.type, index)
