"""DistributedType and PrecisionType: Accelerate's members, usable as their string values."""

from __future__ import annotations

import json

import torch

from accel.distributed.process_state import ProcessState
from accel.distributed.types import DistributedType, PrecisionType, distributed_type_of


def test_distributed_type_members_equal_their_names_as_strings() -> None:
    assert DistributedType.MULTI_CPU == "MULTI_CPU"
    assert DistributedType("MULTI_GPU") is DistributedType.MULTI_GPU
    assert {m.value for m in DistributedType} >= {"NO", "MULTI_CPU", "MULTI_GPU", "MULTI_XPU", "DEEPSPEED", "FSDP", "XLA"}
    assert json.dumps({"t": DistributedType.NO}) == '{"t": "NO"}'


def test_precision_type_prints_as_its_value_and_supports_in() -> None:
    assert PrecisionType.list() == ["no", "fp8", "fp16", "bf16"]
    assert str(PrecisionType.BF16) == "bf16" and PrecisionType.FP16 == "fp16"
    assert "fp8" in PrecisionType and "fp32" not in PrecisionType


def test_distributed_type_of_a_process_state() -> None:
    cpu = torch.device("cpu")
    assert distributed_type_of(ProcessState(device=cpu)) is DistributedType.NO
    assert distributed_type_of(ProcessState(cpu, 1, 1, 2, 2, "gloo")) is DistributedType.MULTI_CPU
    assert distributed_type_of(ProcessState(torch.device("cuda", 0), 0, 0, 4, 4, "nccl")) is DistributedType.MULTI_GPU
