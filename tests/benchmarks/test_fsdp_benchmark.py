"""benchmarks/fsdp.py counts what a process holds: the elements of plain tensors, the inner data of
torchao's FP8 all-gather weight wrapper, native O1's FP8 gradients kept outside param.grad."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fsdp as bench  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402


def test_plain_and_wrapped_tensors_count_their_elements() -> None:
    assert bench.tensor_bytes([torch.zeros(3, 4), torch.zeros(5, dtype=torch.bfloat16)]) == 48 + 10
    fsdp_utils = pytest.importorskip("torchao.float8.fsdp_utils")
    from torchao.float8.float8_training_tensor import LinearMMConfig

    wrapped = fsdp_utils.WeightWithDynamicFloat8CastTensor(torch.zeros(4, 4), LinearMMConfig(), torch.float8_e4m3fn)
    assert bench.tensor_bytes([wrapped]) == 64


def test_native_o1_gradients_are_counted_in_fp8() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="fp8",
                              kwarg_handlers=[FP8RecipeKwargs(backend="native", base_precision="fp32",
                                                              optimization_level="O1")])
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 16, bias=False))
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(16, 32)).square().mean())
    counted = bench.count_bytes(accelerator, model, optimizer)
    weights = 32 * 32 + 32 * 16
    assert counted["grads"] == weights + 32  # one byte each (FP8): both weights and the bias, none in param.grad
    assert counted["params"] == 2 * (weights + 32)  # O1: float16 storage
    assert counted["optimizer"] == 0


def test_tables_show_the_ratio_and_the_spread() -> None:
    parts = {"params": 1 << 20, "grads": 1 << 20, "optimizer": 2 << 20}
    half = {k: v // 2 for k, v in parts.items()}
    table = bench.memory_table({"fp32": {"ddp": parts, "fsdp": half}}, 2)
    assert "| fp32 | 4.00 | 2.00 | 50% | 1.00/1.00/2.00 | 0.50/0.50/1.00 |" in table
    speed = bench.speed_table([{"ddp": 0.1, "fsdp": 0.12}, {"ddp": 0.1, "fsdp": 0.15}, {"ddp": 0.1, "fsdp": 0.11}])
    assert "min 1.10, median 1.20, max 1.50" in speed
