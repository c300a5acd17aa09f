"""Accelerate's enums, with its members and values: `DistributedType` and `PrecisionType`.

Both are `str` enums, so a member equals its value: `state.distributed_type == "MULTI_CPU"` and
`== DistributedType.MULTI_CPU` both hold, and members serialise to JSON as their values.
"""

from __future__ import annotations

import enum
from typing import Any

import torch


class _ContainsValues(enum.EnumMeta):
    """Lets `"fp16" in PrecisionType` test values (Accelerate's `EnumWithContains`)."""

    def __contains__(cls, item: object) -> bool:
        try:
            cls(item)
        except ValueError:
            return False
        return True


class DistributedType(str, enum.Enum):
    """How the processes of a run work together (Accelerate's members, all of them).

    accel runs `NO` (one process) and the data-parallel `MULTI_*` kinds; the others are listed so
    that scripts comparing against them keep working.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


class PrecisionType(str, enum.Enum, metaclass=_ContainsValues):
    """Accelerate's mixed-precision names; `str(member)` is its value and `list()` gives them all.

    accel accepts more precisions than these (`16-true`, `bf16-true`, `64-true`, ...): see the
    precision table in the documentation. `accelerator.mixed_precision` reports accel's canonical
    name, which equals one of these for the four Accelerate knows.
    """

    NO = "no"
    FP8 = "fp8"
    FP16 = "fp16"
    BF16 = "bf16"

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def list(cls) -> list[str]:
        """The values, in declaration order."""
        return [str(member) for member in cls]


_MULTI_BY_DEVICE = {
    "cpu": DistributedType.MULTI_CPU,
    "cuda": DistributedType.MULTI_GPU,
    "xpu": DistributedType.MULTI_XPU,
    "npu": DistributedType.MULTI_NPU,
    "mlu": DistributedType.MULTI_MLU,
    "musa": DistributedType.MULTI_MUSA,
    "hpu": DistributedType.MULTI_HPU,
}


def distributed_type_of(state: Any) -> DistributedType:
    """`NO` for one process, else the data-parallel kind for the device type of `state`
    (a ProcessState or anything with `num_processes` and `device`)."""
    if state.num_processes <= 1:
        return DistributedType.NO
    device = torch.device(state.device)
    return _MULTI_BY_DEVICE.get(device.type, DistributedType.MULTI_GPU)
