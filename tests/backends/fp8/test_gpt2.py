"""A real transformers GPT-2 (GPT2LMHeadModel, tiny config) under the native FP8 backend.

GPT-2 computes with transformers' Conv1D: every projection converts to Float8Conv1D, the
loss follows fp32's, and the state dict is the unconverted model's, under the same names.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accel import Accelerator, FP8RecipeKwargs

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
Conv1D = pytest.importorskip("transformers.pytorch_utils").Conv1D

STEPS = 25


def gpt2() -> Any:
    config = transformers.GPT2Config(
        vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def train(mixed_precision: str, **recipe: Any) -> tuple[Accelerator, Any, list[float]]:
    handlers = [FP8RecipeKwargs(backend="native", **recipe)] if mixed_precision == "fp8" else []
    accelerator = Accelerator(mixed_precision=mixed_precision, cpu=True, kwarg_handlers=handlers)
    model = gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    batch = torch.randint(0, 128, (8, 32), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(STEPS):
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return accelerator, model, losses


@pytest.fixture(scope="module")
def fp32_losses() -> list[float]:
    return train("no")[2]


def test_gpt2_conv1d_layers_train_in_fp8_and_the_loss_follows_fp32(fp32_losses: list[float]) -> None:
    accelerator, model, losses = train("fp8", base_precision="fp32")
    from accel.backends.native_fp8 import Float8Conv1D

    block = model.transformer.h[0]
    assert all(isinstance(m, Float8Conv1D) for m in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj))
    assert losses[-1] < 0.6 * losses[0]  # it learns
    assert abs(losses[-1] - fp32_losses[-1]) < 0.05 * fp32_losses[-1]
    assert losses != fp32_losses  # and it ran in FP8
    report = accelerator.conversion_report
    assert report.summary() == (
        "FP8: converted 9 of 9 Linear and Conv1D layers; weight matrices outside FP8: 2 Embedding"
    )
    assert [d.kind for d in report.layers].count("Conv1D") == 8
    wte = next(h for h in report.others if h.name == "transformer.wte")
    assert "not a matrix product" in wte.reason and "'lm_head'" in wte.reason  # tied to lm_head


def test_gpt2_state_dict_loads_strictly_into_the_unconverted_model() -> None:
    accelerator, model, _ = train("fp8", base_precision="fp32", optimization_level="O2")
    state = accelerator.get_state_dict(model)
    fresh = gpt2()
    assert list(state) == list(fresh.state_dict())
    fresh.load_state_dict(state, strict=True)
    assert isinstance(fresh.transformer.h[1].mlp.c_fc, Conv1D)
    batch = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(2))
    model.eval(), fresh.eval()
    with torch.no_grad():  # FP8 is off in eval mode: the same high-precision computation
        torch.testing.assert_close(model(input_ids=batch).logits, fresh(input_ids=batch).logits, atol=1e-4, rtol=1e-4)
    assert isinstance(accelerator.unwrap_model(model).transformer.h[0].attn.c_attn.weight, torch.nn.Parameter)
