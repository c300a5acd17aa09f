"""fp8_params on the native backend: the layers keep their weights in FP8 between optimizer steps."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.native_fp8 import Float8Linear
from accel.backends.native_fp8.scaling import TensorScaler


def make() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))


def run(fp8_params: bool, level: str = "O1", steps: int = 4, micro_batches: int = 1) -> tuple[Accelerator, nn.Module, Any, list[float]]:
    accelerator = Accelerator(
        mixed_precision="fp8", gradient_accumulation_steps=micro_batches,
        kwarg_handlers=[FP8RecipeKwargs(backend="native", base_precision="fp32", optimization_level=level,
                                        fp8_params=fp8_params)],
    )
    model = make()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps * micro_batches):
        x = torch.randn(16, 32, generator=generator)
        with accelerator.accumulate(model):
            loss = nn.functional.mse_loss(model(x), x)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    return accelerator, model, optimizer, losses


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_fp8_params_trains_exactly_as_casting_the_weight_at_every_forward(level: str) -> None:
    _, model, _, with_params = run(True, level)
    _, _, _, without = run(False, level)
    assert with_params == without
    layers = [m for m in model.modules() if isinstance(m, Float8Linear)]
    assert len(layers) == 2 and all(layer.fp8_weight is not None for layer in layers)
    model(torch.randn(4, 32))
    assert all(layer.fp8_weight.data.dtype == torch.float8_e4m3fn for layer in layers)  # type: ignore[union-attr]


def test_the_weight_is_cast_once_per_optimizer_step(monkeypatch: pytest.MonkeyPatch) -> None:
    casts: list[int] = []
    real = TensorScaler.quantize

    def counting(self: TensorScaler, x: torch.Tensor, *args: Any) -> Any:
        casts.append(x.shape[0])
        return real(self, x, *args)

    monkeypatch.setattr(TensorScaler, "quantize", counting)
    run(True, steps=2, micro_batches=3)
    weight_casts = [n for n in casts if n in (64, 32)]  # the weights have 64 and 32 rows; inputs 16, grads 16
    assert len(weight_casts) == 2 * 2  # two layers, two optimizer steps, though six forwards


def test_loading_a_state_dict_recasts_the_fp8_weight() -> None:
    _, model, _, _ = run(True, steps=1)
    layer = model[0]
    model(torch.randn(4, 32))
    assert layer.fp8_weight.data is not None
    model.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert layer.fp8_weight.data is None
    model(torch.randn(4, 32))
    assert not layer.fp8_weight.data.float().any()


def fp8_layer_bytes(model: nn.Module, optimizer: Any) -> float:
    """Bytes per parameter of the FP8 layers after backward: storage, FP8 weight, gradients, optimizer state."""
    total, count = 0, 0
    for layer in (m for m in model.modules() if isinstance(m, Float8Linear)):
        for name, param in layer.named_parameters(recurse=False):
            count += param.numel()
            total += param.numel() * param.element_size()
            part = None if layer.compact is None else dict(layer.compact.named())[name]
            if part is not None:
                total += part.storage.scale_inv.numel() * 4
                grad = part.grad
                total += sum(t.numel() * t.element_size() for t in (grad.data, grad.scale_inv) if t is not None)
            state = optimizer.optimizer.state.get(param, {})
            total += sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
        if layer.fp8_weight is not None:
            total += layer.fp8_weight.nbytes
    return total / count


@pytest.mark.parametrize(("level", "without", "with_params"), [("O1", 11.0, 12.0), ("O2", 6.0, 7.0)])
def test_bytes_per_parameter(level: str, without: float, with_params: float) -> None:
    for fp8_params, expected in ((False, without), (True, with_params)):
        _, model, optimizer, _ = run(fp8_params, level, steps=1)
        x = torch.randn(16, 32)
        nn.functional.mse_loss(model(x), x).backward()
        assert fp8_layer_bytes(model, optimizer) == pytest.approx(expected, abs=0.02)
