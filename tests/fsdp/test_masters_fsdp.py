"""Mixed precision under FSDP2 keeps float32 masters, as without FSDP: a bf16-loaded model's trainable
parameters are made float32 before sharding (FSDP2 then gathers them in bf16 for the forward)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from fsdp_tiny import batch, loss_of, make_model
from launching import launch

from accel import Accelerator


def _one_process_losses(steps: int) -> list[float]:
    """The same model and global batches in one process under bf16 mixed precision (float32 masters too)."""
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = make_model().to(torch.bfloat16)
    model.embed.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for step in range(steps):
        loss = loss_of(model, *batch(step))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_a_bf16_model_is_sharded_as_float32_masters_and_trains_as_one_process(tmp_path: Path) -> None:
    run = launch("../../fsdp/masters_fsdp_script.py", str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.of("upcast") == [10, 10]  # 2 blocks x 4 and the head's 2 (the embedding is frozen)
    for dtypes in run.of("dtypes"):
        assert {name: dtype for name, dtype in dtypes.items() if name.startswith("embed.")} == {
            "embed.weight": "torch.bfloat16", "embed.bias": "torch.bfloat16"
        }
        assert {dtype for name, dtype in dtypes.items() if not name.startswith("embed.")} == {"torch.float32"}
    assert run.of("optimizer_follows") == [True, True]
    assert run.of("state_dtypes") == [["torch.float32"]] * 2
    reference = _one_process_losses(3)
    for losses in run.of("losses"):
        assert losses == pytest.approx(reference, rel=2e-2)
