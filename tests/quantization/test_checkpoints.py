"""Quantized models and 8-bit optimizers in checkpoints: save_state/load_state resume exactly (the
quant state round-trips through safetensors), save_model files load again, dequantized weights too."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("bitsandbytes")
import bitsandbytes as bnb  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from accel import Accelerator, BitsandbytesKwargs  # noqa: E402
from quantization.models import Net, batch, net  # noqa: E402


def _setup(mode: str | None, seed: int, optimizer: type = bnb.optim.AdamW8bit, precision: str = "no") -> tuple:
    handlers = [BitsandbytesKwargs(mode=mode)] if mode else []
    accelerator = Accelerator(mixed_precision=precision, kwarg_handlers=handlers)
    model = accelerator.prepare(net(seed))
    params = [p for p in model.parameters() if p.requires_grad]
    return accelerator, model, accelerator.prepare(optimizer(params, lr=1e-2, min_8bit_size=256))


def _steps(accelerator: Accelerator, model: nn.Module, optimizer: object, start: int, count: int) -> list[float]:
    losses = []
    for step in range(start, start + count):
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(("mode", "optimizer"), [("nf4-dq", bnb.optim.AdamW8bit), ("int8", bnb.optim.PagedAdamW8bit),
                                                 ("int8-training", bnb.optim.AdamW8bit), (None, bnb.optim.Lion8bit)])
def test_save_state_and_load_state_resume_exactly(mode: str | None, optimizer: type, tmp_path: Path) -> None:
    accelerator, model, opt = _setup(mode, 0, optimizer)
    _steps(accelerator, model, opt, 0, 2)
    accelerator.save_state(tmp_path / "ckpt")
    expected = _steps(accelerator, model, opt, 2, 3)
    if mode in ("int8-training", None):  # trainable weights large enough for 8-bit state (frozen modes: biases only)
        assert any(t.dtype == torch.uint8 for s in opt.state.values() for t in s.values() if torch.is_tensor(t))

    # a fresh process's setup: another seed, so every quantized weight and its quant state differ until loaded
    accelerator, model, opt = _setup(mode, 1, optimizer)
    accelerator.load_state(tmp_path / "ckpt")
    assert _steps(accelerator, model, opt, 2, 3) == expected


def test_fp16_loss_scaler_unscales_before_an_8bit_step() -> None:
    """SGD's update is lr * gradient: a missing unscale would move the weights 65536 times too far."""
    torch.manual_seed(0)
    x, y = batch(n=4)
    reference = net()
    nn.functional.cross_entropy(reference(x), y).backward()
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(net())
    before = model.fc1.weight.detach().clone()
    optimizer = accelerator.prepare(bnb.optim.SGD8bit(model.parameters(), lr=0.1, momentum=0.9, min_8bit_size=256))
    accelerator.backward(nn.functional.cross_entropy(model(x), y))
    optimizer.step()
    assert accelerator.scaler.get_scale() == 65536.0 and not accelerator.optimizer_step_was_skipped
    moved = before - model.fc1.weight.detach()
    expected = 0.1 * reference.fc1.weight.grad
    assert (moved - expected).norm() / expected.norm() < 0.05


def test_save_model_writes_the_quant_state_and_a_quantized_model_loads_it(tmp_path: Path) -> None:
    accelerator, model, _ = _setup("nf4-dq", 0)
    accelerator.save_model(model, tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert saved["fc1.weight"].dtype == torch.uint8
    assert {"fc1.weight.absmax", "fc1.weight.nested_absmax", "fc1.weight.quant_state.bitsandbytes__nf4"} <= set(saved)
    other = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="nf4-dq")]).prepare(net(5))
    other.load_state_dict(saved)
    x = batch()[0]
    assert torch.equal(other(x), model(x))
    fp4 = Accelerator(kwarg_handlers=[BitsandbytesKwargs(mode="fp4")]).prepare(net(5))
    with pytest.raises(RuntimeError, match="fc1.weight was saved in mode 'nf4-dq', but this layer runs 'fp4'"):
        fp4.load_state_dict(saved)


@pytest.mark.parametrize("mode", ["nf4", "int8"])
def test_dequantized_state_dict_loads_into_the_unquantized_model(mode: str) -> None:
    accelerator, model, _ = _setup(mode, 0)
    weights = accelerator.get_state_dict(model, dequantize=True)
    assert set(weights) == set(Net().state_dict())
    plain = Net()
    plain.load_state_dict(weights)
    x = batch()[0]
    assert (plain(x) - model(x)).abs().max() < 2e-2  # the same weights; int8 computes in fp16
    reference = net(0).fc1.weight
    assert (weights["fc1.weight"] - reference).abs().max() < 0.2 * reference.abs().max()
