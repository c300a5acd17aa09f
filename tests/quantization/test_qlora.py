"""QLoRA: peft's LoRA adapters on a quantized model train, in full precision, while the 4-bit base stays frozen."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("bitsandbytes")
peft = pytest.importorskip("peft")
import bitsandbytes as bnb  # noqa: E402

from accel import Accelerator, BitsandbytesKwargs  # noqa: E402
from quantization.models import batch, net  # noqa: E402


def _train(accelerator: Accelerator, model: nn.Module, steps: int = 10) -> list[float]:
    optimizer = accelerator.prepare(torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-2))
    x, y = batch()
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _lora() -> object:
    return peft.LoraConfig(r=4, lora_alpha=8, target_modules=["fc1", "fc2"], lora_dropout=0.0)


def test_lora_then_prepare_quantizes_the_base_layers_and_trains_only_the_adapters() -> None:
    model = peft.get_peft_model(net(), _lora())
    accelerator = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="nf4-dq")])
    model = accelerator.prepare(model)
    base = model.base_model.model
    assert isinstance(base.fc1.base_layer, bnb.nn.Linear4bit) and isinstance(base.head, bnb.nn.Linear4bit)
    assert type(base.fc1.lora_A["default"]) is nn.Linear
    report = accelerator.quantization_report
    assert report.summary() == "bitsandbytes nf4-dq: quantized 3 of 7 Linear layers (skipped: 4 peft adapter)"
    packed = base.fc1.base_layer.weight.detach().clone()
    losses = _train(accelerator, model)
    assert losses[-1] < losses[0] - 0.1
    assert torch.equal(base.fc1.base_layer.weight, packed)
    assert {n.split(".")[-3] for n, p in model.named_parameters() if p.requires_grad} == {"lora_A", "lora_B"}


def test_prepare_then_lora_adapts_the_quantized_layers() -> None:
    accelerator = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="nf4")])
    model = peft.get_peft_model(accelerator.prepare(net()), _lora())
    model = accelerator.prepare(model)
    assert isinstance(model.base_model.model.fc1.base_layer, bnb.nn.Linear4bit)
    assert "0 of 7 Linear layers (skipped: 3 already converted, 4 peft adapter)" in accelerator.quantization_report.summary()
    losses = _train(accelerator, model)
    assert losses[-1] < losses[0] - 0.1
