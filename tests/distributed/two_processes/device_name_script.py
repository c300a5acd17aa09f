"""What accel and Accelerate name this process's device, in one run (test_device_name.py):

    device_name_script.py

Both libraries' Accelerator(cpu=True), as a CPU script for either is written; each reports
`str(accelerator.device)`, `str(PartialState().device)` and `repr` of the device.
"""

from __future__ import annotations

import os
from typing import Any

import accelerate
import torch
from launching import report

import accel


def names(library: Any) -> dict[str, str]:
    """The device as `library`'s Accelerator and PartialState give it."""
    accelerator = library.Accelerator(cpu=True)
    return {"accelerator": str(accelerator.device), "partial_state": str(library.PartialState().device),
            "repr": repr(accelerator.device)}


def main() -> None:
    report("device", {"accel": names(accel), "accelerate": names(accelerate)})
    if torch.distributed.is_initialized():  # leave the group together (a gloo rank exiting early can abort the other)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    os._exit(0)  # Accelerate's processes sometimes abort at interpreter shutdown after reporting
