"""O1/O2 storage of a layer: float16 weights (their real values), FP8 gradients, and O2's Adam."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from accel.backends.native_fp8.adam import AdamHyper, adam_step, init_state
from accel.backends.native_fp8.compact import CompactParameter
from accel.backends.native_fp8.grads import FP8Gradient
from accel.backends.native_fp8.linear import Float8Linear
from accel.backends.native_fp8.weights import HalfWeight


def compact_layer(seed: int = 0) -> tuple[nn.Linear, Float8Linear]:
    torch.manual_seed(seed)
    reference = nn.Linear(32, 48)
    layer = Float8Linear.from_linear(nn.Linear(32, 48))
    layer.load_state_dict(reference.state_dict())
    layer.make_compact()
    return reference, layer


def test_half_weight_stores_float16_and_gives_real_values_back() -> None:
    value = torch.randn(64, 64) * 1e-3
    param = nn.Parameter(value.clone())
    storage = HalfWeight(param)
    assert param.dtype == torch.float16
    # the storage is the real values: reading the parameter gives them, within float16's rounding
    assert torch.equal(param.detach().float(), storage.value())
    # float16 rounds to 11 significant bits; below 2**-14 (subnormals) to a spacing of 2**-24
    assert torch.allclose(param.detach().float(), value, rtol=2**-11, atol=2**-25)
    storage.materialise()
    assert param.dtype == torch.float32 and torch.equal(param.detach(), storage.value())
    storage.restore()
    assert param.dtype == torch.float16


def test_stochastic_storage_keeps_updates_far_below_float16_resolution() -> None:
    """1000 updates of 1e-6 on weights of 1.0 (ulp 2**-10): nearest rounding keeps none."""
    kept = {}
    for name, generator in (("nearest", None), ("stochastic", torch.Generator().manual_seed(0))):
        storage = HalfWeight(nn.Parameter(torch.ones(4096)))
        for _ in range(1000):
            storage.materialise()
            storage.param.data.sub_(1e-6)
            storage.store(generator)
        kept[name] = 1.0 - storage.value().mean().item()
    assert kept["nearest"] == 0.0
    assert kept["stochastic"] == pytest.approx(1e-3, rel=0.05)


def test_compact_state_dict_has_real_values_and_loading_is_bit_exact() -> None:
    reference, layer = compact_layer()
    state = layer.state_dict()
    assert set(state) == {"weight", "bias"} and state["weight"].dtype == torch.float32
    assert torch.allclose(state["weight"], reference.weight, rtol=2**-11)
    stored = layer.weight.detach().clone()
    _, other = compact_layer(seed=1)
    other.load_state_dict(state)
    assert torch.equal(other.weight, stored)
    nn.Linear(32, 48).load_state_dict(state, strict=True)


def test_compact_layer_sends_gradients_to_fp8_and_matches_fp32() -> None:
    reference, layer = compact_layer()
    x, grad = torch.randn(64, 32), torch.randn(64, 48)
    reference(x).backward(grad)
    layer(x).backward(grad)
    assert layer.weight.grad is None and layer.bias.grad is None
    for part, expected in ((layer.compact.weight, reference.weight.grad), (layer.compact.bias, reference.bias.grad)):
        assert part.grad.data.dtype == torch.float8_e4m3fn
        assert ((part.grad.dequantize() - expected).norm() / expected.norm()).item() < 0.15


def test_high_precision_mode_of_a_compact_layer_still_trains() -> None:
    reference, layer = compact_layer()
    layer.enabled = False
    x = torch.randn(16, 32)
    assert torch.allclose(layer(x), reference(x), rtol=1e-2, atol=1e-3)
    layer(x).sum().backward()
    assert layer.weight.grad is None and layer.compact.weight.grad.data is not None


def test_unconverting_gives_float32_parameters_back() -> None:
    reference, layer = compact_layer()
    linear = layer.to_linear()
    assert linear.weight.dtype == torch.float32
    assert torch.allclose(linear.weight, reference.weight, rtol=2**-11)


def test_casting_the_module_keeps_the_storage() -> None:
    _, layer = compact_layer()
    stored = layer.weight.detach().clone()
    layer.float()
    assert torch.equal(layer.weight, stored)


def test_fp8_gradient_accumulates_and_flags_non_finite_values() -> None:
    gradient = FP8Gradient(torch.device("cpu"))
    parts = [torch.randn(32, 32) * 10.0**k for k in (-3, -1, -2)]
    for part in parts:
        gradient.add(part.clone())
    total = sum(parts)
    assert ((gradient.dequantize() - total).norm() / total.norm()).item() < 0.05
    assert not gradient.found_nonfinite().item()
    gradient.add(torch.full((32, 32), math.inf))
    assert gradient.found_nonfinite().item() and torch.isnan(gradient.dequantize()).all()
    gradient.end_step()
    assert gradient.data is None and not gradient.found_nonfinite().item()


def test_fp8_gradient_state_round_trips() -> None:
    gradient = FP8Gradient(torch.device("cpu"))
    gradient.add(torch.randn(8, 8))
    other = FP8Gradient(torch.device("cpu"))
    other.load_state_dict(gradient.state_dict())
    assert torch.equal(other.dequantize(), gradient.dequantize())
    with pytest.raises(ValueError, match="expected keys"):
        other.load_state_dict({"data": torch.zeros(2)})


def test_o2_adam_follows_torch_adamw_on_a_quadratic() -> None:
    """Minimise ||W - T||^2 with both; O2's FP8/float16 moments end within a few percent."""
    torch.manual_seed(0)
    target = torch.randn(64, 64)
    start = torch.randn(64, 64)
    reference = nn.Parameter(start.clone())
    optimizer = torch.optim.AdamW([reference], lr=1e-2, weight_decay=0.01)
    compact = CompactParameter(nn.Parameter(start.clone()), torch.Generator().manual_seed(0))
    hyper = AdamHyper(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, decoupled=True, maximize=False)
    state: dict[str, torch.Tensor] = {}
    for _ in range(300):
        reference.grad = 2 * (reference.detach() - target)
        optimizer.step()
        adam_step(compact, state, 2 * (compact.storage.value() - target), hyper)
    distance = (reference.detach() - target).norm().item()
    assert (compact.storage.value() - target).norm().item() == pytest.approx(distance, rel=0.1, abs=0.05)
    assert state["exp_avg_ratio"].dtype == torch.float8_e4m3fn and state["exp_avg_sq_sqrt"].dtype == torch.float16
    assert state["step"].item() == 300


def test_o2_adopts_torch_adam_moments() -> None:
    exp_avg, exp_avg_sq = torch.randn(16, 16) * 1e-3, torch.rand(16, 16) * 1e-6
    state = {"step": torch.tensor(7.0), "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    init_state(state, torch.zeros(16, 16))
    rms = state["exp_avg_sq_sqrt"].float() * state["exp_avg_sq_sqrt_scale_inv"]
    ratio = state["exp_avg_ratio"].float() * state["exp_avg_ratio_scale_inv"]
    assert torch.allclose(rms, exp_avg_sq.sqrt(), rtol=1e-3)
    assert ((ratio * rms - exp_avg).norm() / exp_avg.norm()).item() < 0.05
    assert state["step"].item() == 7.0 and "exp_avg" not in state
