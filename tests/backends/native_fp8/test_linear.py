"""Float8Linear against an fp32 nn.Linear: forward, backward, modes and bookkeeping."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from accel.backends.native_fp8.cpu_gemm import compute_dtype
import torch.nn.functional as F
from torch import nn

from accel.backends.native_fp8.formats import E4M3, E5M2
from accel.backends.native_fp8.linear import Float8Config, Float8Linear, as_mat2, pad_rows, scaled_mm

# Measured at these sizes: ~3-4% on outputs, ~5-6% on gradients (E4M3 grads: ~4%).
OUT_TOL = 0.07
GRAD_TOL = 0.10


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.float() - expected.float()).norm() / expected.float().norm())


def pair(
    in_features: int = 64, out_features: int = 32, bias: bool = True, **config: object
) -> tuple[nn.Linear, Float8Linear]:
    """An fp32 reference Linear and an FP8 layer with the same values (separate Parameters)."""
    torch.manual_seed(0)
    reference = nn.Linear(in_features, out_features, bias=bias)
    fp8 = Float8Linear.from_linear(copy.deepcopy(reference), Float8Config(**config))  # type: ignore[arg-type]
    return reference, fp8


def run(layer: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    y = layer(x)
    y.backward(grad)
    assert x.grad is not None
    return y.detach(), x.grad


@pytest.mark.parametrize("fp8_format", ["HYBRID", "E4M3"])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_backward_close_to_fp32(fp8_format: str, bias: bool) -> None:
    reference, fp8 = pair(bias=bias, fp8_format=fp8_format)
    x = torch.randn(48, 64)
    grad = torch.randn(48, 32) * 1e-3
    y_ref, dx_ref = run(reference, x, grad)
    y, dx = run(fp8, x, grad)
    assert y.dtype == torch.float32 and dx.dtype == torch.float32
    assert rel_err(y, y_ref) < OUT_TOL
    assert rel_err(dx, dx_ref) < GRAD_TOL
    assert fp8.weight.grad is not None and fp8.weight.grad.dtype == torch.float32
    assert reference.weight.grad is not None
    assert rel_err(fp8.weight.grad, reference.weight.grad) < GRAD_TOL
    if bias:
        torch.testing.assert_close(fp8.bias.grad, reference.bias.grad)
    else:
        assert fp8.bias is None


def test_gradient_dtype_follows_format() -> None:
    assert Float8Linear(16, 16).grad_scaler.dtype == E5M2
    assert Float8Linear(16, 16, config=Float8Config(fp8_format="E4M3")).grad_scaler.dtype == E4M3
    assert Float8Linear(16, 16).input_scaler.dtype == E4M3


def test_three_d_input() -> None:
    reference, fp8 = pair()
    x = torch.randn(3, 5, 64)
    grad = torch.randn(3, 5, 32)
    y_ref, dx_ref = run(reference, x, grad)
    y, dx = run(fp8, x, grad)
    assert y.shape == (3, 5, 32) and dx.shape == (3, 5, 64)
    assert rel_err(y, y_ref) < OUT_TOL
    assert rel_err(dx, dx_ref) < GRAD_TOL


def test_one_d_input() -> None:
    reference, fp8 = pair()
    x = torch.randn(64)
    assert fp8(x).shape == (32,)
    assert rel_err(fp8(x).detach(), reference(x).detach()) < OUT_TOL


def test_fp16_autocast_on_cpu() -> None:
    reference, fp8 = pair()
    x = torch.randn(32, 64)
    grad = torch.randn(32, 32)
    y_ref, dx_ref = run(reference, x, grad)
    with torch.autocast("cpu", dtype=torch.float16):
        x16 = x.detach().clone().requires_grad_()
        y = fp8(x16)
    assert y.dtype == torch.float16  # as nn.Linear under autocast
    y.backward(grad.half())
    assert x16.grad is not None and x16.grad.dtype == torch.float32
    assert fp8.weight.grad is not None and fp8.weight.grad.dtype == torch.float32
    assert rel_err(y.detach(), y_ref) < OUT_TOL
    assert rel_err(x16.grad, dx_ref) < GRAD_TOL


def test_half_precision_input_gives_output_in_its_dtype() -> None:
    reference, fp8 = pair()
    x = torch.randn(16, 64)
    y = fp8(x.to(torch.bfloat16))
    assert y.dtype == torch.bfloat16
    assert rel_err(y.detach(), reference(x).detach()) < OUT_TOL


def test_current_scaling_close_to_fp32() -> None:
    reference, fp8 = pair(scaling="current")
    x = torch.randn(32, 64)
    grad = torch.randn(32, 32)
    y_ref, dx_ref = run(reference, x, grad)
    y, dx = run(fp8, x, grad)
    assert rel_err(y, y_ref) < OUT_TOL
    assert rel_err(dx, dx_ref) < GRAD_TOL


def test_no_input_gradient_when_input_needs_none() -> None:
    _, fp8 = pair()
    fp8(torch.randn(16, 64)).sum().backward()
    assert fp8.weight.grad is not None


def test_frozen_weight_gets_no_gradient() -> None:
    _, fp8 = pair()
    fp8.weight.requires_grad_(False)
    x = torch.randn(16, 64, requires_grad=True)
    fp8(x).sum().backward()
    assert fp8.weight.grad is None and x.grad is not None


def test_no_grad_forward() -> None:
    reference, fp8 = pair()
    x = torch.randn(16, 64)
    with torch.no_grad():
        y = fp8(x)
    assert not y.requires_grad
    assert rel_err(y, reference(x).detach()) < OUT_TOL


def test_disabled_is_exactly_f_linear() -> None:
    _, fp8 = pair()
    fp8.enabled = False
    x = torch.randn(8, 64, requires_grad=True)
    y = fp8(x)
    assert torch.equal(y, F.linear(x, fp8.weight, fp8.bias))
    y.sum().backward()
    assert fp8.input_scaler.step_amax.item() == 0.0  # no FP8 bookkeeping either


def test_from_linear_keeps_the_same_parameter_objects_and_optimizer_works() -> None:
    linear = nn.Linear(32, 16)
    weight, bias = linear.weight, linear.bias
    optimizer = torch.optim.SGD(linear.parameters(), lr=0.1)
    layer = Float8Linear.from_linear(linear)
    assert layer.weight is weight and layer.bias is bias
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    before = weight.detach().clone()
    layer(torch.randn(4, 32)).sum().backward()
    optimizer.step()
    assert not torch.equal(weight, before)


def test_from_linear_without_bias() -> None:
    layer = Float8Linear.from_linear(nn.Linear(32, 16, bias=False))
    assert layer.bias is None
    assert "bias" not in layer.state_dict()


def test_state_dict_has_only_weight_and_bias() -> None:
    _, fp8 = pair()
    fp8(torch.randn(4, 64))
    assert list(fp8.state_dict()) == ["weight", "bias"]


def test_to_linear_gives_back_the_original_module() -> None:
    linear = nn.Linear(32, 16)
    layer = Float8Linear.from_linear(linear)
    assert layer.to_linear() is linear
    assert linear.weight is layer.weight
    plain = Float8Linear(32, 16).to_linear()
    assert type(plain) is nn.Linear


def test_hooks_of_the_replaced_module_keep_running() -> None:
    linear = nn.Linear(32, 16)
    calls: list[str] = []
    handle = linear.register_forward_hook(lambda module, args, out: calls.append("hook"))
    layer = Float8Linear.from_linear(linear)
    layer(torch.randn(2, 32))
    assert calls == ["hook"]
    handle.remove()
    layer(torch.randn(2, 32))
    assert calls == ["hook"]


def test_training_mode_is_copied() -> None:
    linear = nn.Linear(32, 16).eval()
    assert not Float8Linear.from_linear(linear).training


def test_nan_input_is_flagged_until_update() -> None:
    _, fp8 = pair()
    x = torch.randn(8, 64)
    x[3, 5] = math.nan
    fp8(x)
    assert fp8.found_nonfinite().item() is True
    for scaler in fp8.scalers().values():
        scaler.update()
    assert fp8.found_nonfinite().item() is False


def test_inf_gradient_is_flagged() -> None:
    _, fp8 = pair()
    y = fp8(torch.randn(8, 64))
    grad = torch.zeros_like(y)
    grad[0, 0] = math.inf
    y.backward(grad)
    assert fp8.grad_scaler.found_nonfinite().item() is True
    assert fp8.found_nonfinite().item() is True


def test_scalers_keep_their_dtypes_when_the_module_is_cast() -> None:
    layer = Float8Linear(32, 16).to(torch.float16)
    assert layer.weight.dtype == torch.float16
    for scaler in layer.scalers().values():
        assert scaler.scale.dtype == torch.float32
        assert scaler.calibrated.dtype == torch.bool
    x = torch.randn(4, 32, dtype=torch.float16, requires_grad=True)
    layer(x).float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.float16


def test_layer_built_on_meta_device_materializes_with_fresh_scalers() -> None:
    with torch.device("meta"):
        layer = Float8Linear(32, 16)
    layer.to_empty(device="cpu")
    nn.init.normal_(layer.weight, std=0.1)
    nn.init.zeros_(layer.bias)
    for scaler in layer.scalers().values():
        assert scaler.device.type == "cpu" and scaler.scale.item() == 1.0
    assert layer(torch.randn(4, 32)).shape == (4, 16)


def test_as_mat2_gives_column_major_off_cpu_and_leaves_cpu_tensors() -> None:
    cpu = torch.empty(32, 16)
    assert as_mat2(cpu) is cpu
    meta = torch.empty(32, 16, device="meta")
    laid_out = as_mat2(meta)
    assert laid_out.shape == (32, 16) and laid_out.stride() == (1, 32)
    column_major = meta.t().contiguous().t()
    assert as_mat2(column_major) is column_major


def test_zero_row_padding_leaves_the_weight_gradient_unchanged() -> None:
    g = torch.randn(21, 32).to(E5M2)
    x = torch.randn(21, 48).to(E4M3)
    padded_g, padded_x = pad_rows(g, 16), pad_rows(x, 16)
    assert padded_g.shape == (32, 32) and padded_g.dtype == E5M2
    assert torch.equal(padded_g[:21].view(torch.uint8), g.view(torch.uint8))
    assert padded_g[21:].float().abs().sum().item() == 0.0
    one = torch.tensor(1.0)
    expected = scaled_mm(g.t().contiguous(), x, one, one, torch.float32)
    actual = scaled_mm(padded_g.t().contiguous(), padded_x, one, one, torch.float32)
    assert torch.equal(actual, expected)
    assert pad_rows(padded_g, 16) is padded_g


def test_bad_config_raises_value_error() -> None:
    with pytest.raises(ValueError, match=r"fp8_format='E5M2' is not supported"):
        Float8Config(fp8_format="E5M2")
    with pytest.raises(ValueError, match=r"margin=-2"):
        Float8Config(margin=-2)
    with pytest.raises(ValueError, match=r"count_stats='yes'"):
        Float8Config(count_stats="yes")  # type: ignore[arg-type]


def test_small_mlp_trains_in_fp8() -> None:
    torch.manual_seed(0)
    config = Float8Config(amax_history_len=16)
    layers = [Float8Linear.from_linear(nn.Linear(32, 64), config),
              Float8Linear.from_linear(nn.Linear(64, 16), config)]
    model = nn.Sequential(layers[0], nn.ReLU(), layers[1])
    teacher = nn.Linear(32, 16)
    scalers = [s for layer in layers for s in layer.scalers().values()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randn(256, 32)
    target = teacher(x).detach()
    losses = []
    for _ in range(40):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        for scaler in scalers:
            scaler.update()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_autocast_the_fp8_gemm_is_not_autocast_and_y_has_the_autocast_dtype(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An FP8 base precision runs the model under autocast: the FP8 product must reach torch._scaled_mm (or
    the CPU product) as it is, with its fp32 scales, and give y in the autocast dtype, as nn.Linear does."""
    import accel.backends.native_fp8.gemm as gemm

    seen: list[bool] = []
    real_mm = gemm.cpu_mm

    def recording_mm(*args: object) -> torch.Tensor:
        seen.append(torch.is_autocast_enabled("cpu"))
        return real_mm(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(gemm, "cpu_mm", recording_mm)
    _, fp8 = pair(bias=False, scaling="current")
    x = torch.randn(16, 64)
    plain = fp8(x).detach()
    with torch.autocast("cpu", dtype=dtype):
        y = fp8(x)
    assert y.dtype == dtype and seen == [False, False]
    if dtype == compute_dtype():
        # the scales are the GEMM's alpha, applied before its one rounding to the output dtype, where the
        # float32 output rounds the product to that dtype first: at most one unit in the last place apart
        torch.testing.assert_close(y.detach(), plain.to(dtype), rtol=2.0**-7, atol=0)
    else:
        torch.testing.assert_close(y.detach(), plain.to(dtype), rtol=0, atol=0)
    y.float().sum().backward()
    assert seen[2:] == [False] and fp8.weight.grad is not None and fp8.weight.grad.dtype == torch.float32
