"""Float8Conv1D: transformers' Conv1D (GPT-2's linear layer, weight stored (in, out)) in FP8."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from accel.backends.conversion import CONV1D_REFUSED, is_conv1d
from accel.backends.native_fp8 import Float8Config, Float8Conv1D, Float8Linear, convert_linears, unconvert_linears

Conv1D = pytest.importorskip("transformers.pytorch_utils", reason="transformers is not installed").Conv1D

CONFIG = Float8Config(amax_history_len=4)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.float() - expected.float()).norm() / expected.float().norm())


def conv1d(nf: int = 64, nx: int = 32) -> nn.Module:
    torch.manual_seed(0)
    layer = Conv1D(nf, nx)
    nn.init.normal_(layer.bias, std=0.1)
    return layer


def run(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = layer(x)
    (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
    return y.detach(), x.grad, layer.weight.grad, layer.bias.grad


def test_fp8_conv1d_computes_what_conv1d_computes_within_fp8_rounding() -> None:
    reference = conv1d()
    x = torch.randn(4, 8, 32)
    expected = run(reference, x)
    layer = Float8Conv1D.from_conv1d(copy.deepcopy(reference), CONFIG)
    y, grad_x, grad_w, grad_b = run(layer, x)
    assert layer.weight.shape == (32, 64) and grad_w.shape == (32, 64)  # Conv1D's layout, (in, out)
    assert relative_error(y, expected[0]) < 0.06
    assert relative_error(grad_x, expected[1]) < 0.1
    assert relative_error(grad_w, expected[2]) < 0.1
    torch.testing.assert_close(grad_b, expected[3])  # the bias gradient is summed in high precision
    assert relative_error(y, expected[0]) > 0  # it did run in FP8


def test_the_conv1d_parameters_names_and_hooks_are_kept_and_given_back() -> None:
    original = conv1d()
    calls: list[int] = []
    original.register_forward_hook(lambda *_: calls.append(1))
    weight, bias = original.weight, original.bias
    model = nn.Sequential(original)
    keys = list(model.state_dict())
    report = convert_linears(model, make_layer=Float8Linear.from_linear, make_conv1d=Float8Conv1D.from_conv1d)
    layer = model[0]
    assert isinstance(layer, Float8Conv1D) and isinstance(layer, Float8Linear)
    assert layer.weight is weight and layer.bias is bias and (layer.nx, layer.nf) == (32, 64)
    assert list(model.state_dict()) == keys and model.state_dict()["0.weight"].shape == (32, 64)
    model(torch.randn(2, 32))
    assert calls == [1]
    assert report.layers[0].line() == "0 (Conv1D 32 -> 64): converted"
    assert unconvert_linears(model) == 1 and model[0] is original and original.weight is weight


def test_fp8_off_and_o1_storage_keep_the_conv1d_layout() -> None:
    reference = conv1d()
    x = torch.randn(16, 32)
    expected = run(reference, x)
    layer = Float8Conv1D.from_conv1d(copy.deepcopy(reference), CONFIG)
    layer.enabled = False
    y, grad_x, grad_w, _ = run(layer, x)
    torch.testing.assert_close(y, expected[0])
    torch.testing.assert_close(grad_w, expected[2])
    compact = Float8Conv1D.from_conv1d(copy.deepcopy(reference), CONFIG)
    compact.make_compact()
    for enabled in (True, False):  # the FP8 GEMMs, then high precision on the 16-bit storage
        compact.enabled = enabled
        out = compact(x.clone().requires_grad_(True))
        (out * torch.linspace(-1, 1, 64)).sum().backward()
        grad = compact.compact.weight.grad.take()
        assert grad.shape == (32, 64)
        assert relative_error(grad, expected[2]) < 0.12
        assert relative_error(out.detach(), expected[0]) < 0.06
    state = compact.state_dict()
    assert state["weight"].shape == (32, 64) and state["weight"].dtype == torch.float32
    assert relative_error(state["weight"], reference.weight.detach()) < 1e-3  # float16 storage with a scale


def test_conversion_without_make_conv1d_skips_conv1d_with_the_reason() -> None:
    model = nn.Sequential(conv1d(), nn.Linear(64, 16))
    report = convert_linears(model, make_layer=Float8Linear.from_linear)
    assert isinstance(model[0], Conv1D) and isinstance(model[1], Float8Linear)
    assert report.layers[0].category == CONV1D_REFUSED and "make_conv1d=None" in report.layers[0].reason
    assert report.summary() == (
        "FP8: converted 1 of 2 Linear and Conv1D layers (skipped: 1 Conv1D (converted by backend='native' only))"
    )


def test_misaligned_and_excluded_conv1d_follow_the_common_rule() -> None:
    model = nn.Sequential(Conv1D(64, 10), Conv1D(64, 64))
    report = convert_linears(
        model, exclude_modules=("1",), make_layer=Float8Linear.from_linear, make_conv1d=Float8Conv1D.from_conv1d
    )
    assert [(d.category, d.reason) for d in report.layers] == [
        ("not a multiple of 16", "in_features 10 is not a multiple of 16"),
        ("excluded", "excluded by pattern '1'"),
    ]


def test_bad_input_is_refused_with_the_argument_named() -> None:
    assert not is_conv1d(nn.Linear(4, 4)) and is_conv1d(Conv1D(4, 8))
    with pytest.raises(ValueError, match="conv1d=Linear is not supported; accepted: a transformers Conv1D"):
        Float8Conv1D.from_conv1d(nn.Linear(16, 16))
    with pytest.raises(TypeError, match="from_conv1d"):
        Float8Conv1D(16, 16)
    with pytest.raises(ValueError, match="make_conv1d=3 is not supported"):
        convert_linears(nn.Sequential(Conv1D(16, 16)), make_layer=Float8Linear.from_linear, make_conv1d=3)  # type: ignore[arg-type]
