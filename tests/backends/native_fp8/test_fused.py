"""The fused CPU quantization kernel: bit for bit what the FP8 cast and upcast give, and the amax."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accel.backends.native_fp8 import fused
from accel.backends.native_fp8.formats import E4M3, E5M2, fp8_max
from accel.backends.native_fp8.gemm import operand
from accel.backends.native_fp8.grads import FP8Gradient
from accel.backends.native_fp8.scaling import TensorScaler, tensor_amax
from tests.backends.native_fp8.test_cpu_quantize import SCALES, every_pattern, today

pytestmark = pytest.mark.skipif(not fused.available(), reason=f"fused kernels: {fused.status()}")


def float32_values() -> torch.Tensor:
    """float32 over many binades, the FP8 ties and extremes among them."""
    torch.manual_seed(0)
    spread = torch.randn(1 << 16) * torch.exp2(torch.randint(-40, 40, (1 << 16,)).float())
    ties = torch.arange(0, 4096, dtype=torch.float32) * 2.0**-13  # halfway points of both formats' grids
    extremes = torch.tensor([0.0, -0.0, 1e-45, 3e38, -3e38, float("inf"), float("-inf"), 447.99, 464.0, 57344.0, 61440.0])
    return torch.cat((spread, ties, -ties, extremes))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_bit_identical_to_cast_and_upcast(dtype: torch.dtype, fp8_dtype: torch.dtype, out_dtype: torch.dtype) -> None:
    x = float32_values() if dtype == torch.float32 else every_pattern(dtype)
    nan = x.isnan()
    int_view = torch.int16 if out_dtype == torch.bfloat16 else torch.int32
    for value in SCALES:
        scale = torch.tensor(value)
        got, amax = fused.quantize_operand(x, scale, fp8_dtype, out_dtype)
        want = today(x, scale, fp8_dtype, out_dtype)
        assert got.dtype == out_dtype and got.shape == x.shape
        mismatched = (got.view(int_view) != want.view(int_view)) & ~nan
        assert not mismatched.any(), (value, x[mismatched][:8].tolist(), got[mismatched][:8].tolist())
        assert got[nan].isnan().all()
        assert torch.equal(amax, tensor_amax(x)) or (amax.isnan() and tensor_amax(x).isnan())


def test_signed_zeros_subnormals_saturation_and_amax() -> None:
    x = torch.tensor([[-0.0, 0.0, -(2.0**-11), 2.0**-9], [3 * 2.0**-10, 464.0, -1e30, float("-inf")]])
    got, amax = fused.quantize_operand(x, torch.tensor(1.0), E4M3, torch.bfloat16)
    assert got.shape == (2, 4)
    assert got.reshape(-1).tolist() == [0.0, 0.0, 0.0, 2.0**-9, 2.0**-8, 448.0, -448.0, -448.0]
    assert torch.signbit(got).reshape(-1).tolist() == [True, False, True, False, False, False, True, True]
    assert amax.item() == float("inf") and amax.dtype == torch.float32
    assert fp8_max(E4M3) == 448.0


def test_supports_contiguous_cpu_floats() -> None:
    assert fused.supports(torch.zeros(2, 3)) and fused.supports(torch.zeros(2, dtype=torch.float16))
    assert not fused.supports(torch.zeros(3, 2).t())  # a transposed weight goes to the eager kernels
    assert not fused.supports(torch.zeros(2, dtype=torch.float64))
    assert not fused.supports(torch.zeros(2, device="meta"))
    assert fused.status() == "fused (torch.compile)"


def _run(scaler: TensorScaler, x_scale_inv: torch.Tensor | None) -> list[tuple[torch.Tensor, ...]]:
    torch.manual_seed(1)
    out = []
    for step in range(4):  # the first step casts with its own amax, the later ones with the history's
        x = (torch.randn(64, 48) * (step + 1) * 10).to(torch.float16 if x_scale_inv is not None else torch.float32)
        got, inv = scaler.quantize_operand(x, x_scale_inv)
        out.append((got, inv, scaler.step_amax))
        scaler.update()
        out.append((scaler.scale, scaler.amax_history))
    return out


@pytest.mark.parametrize("scaling", ["delayed", "current"])
@pytest.mark.parametrize("stored_scaled", [False, True])
def test_scaler_gives_what_the_eager_kernels_give(scaling: str, stored_scaled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    x_scale_inv = torch.tensor(2.0**-7) if stored_scaled else None
    fused_run = _run(TensorScaler(E4M3, scaling=scaling, amax_history_len=4), x_scale_inv)
    monkeypatch.setattr(fused, "supports", lambda x: False)
    eager_run = _run(TensorScaler(E4M3, scaling=scaling, amax_history_len=4), x_scale_inv)
    for got, want in zip(fused_run, eager_run):
        for a, b in zip(got, want):
            assert torch.equal(a, b)


def test_scaler_with_the_fused_kernel_gives_the_operand_of_quantize() -> None:
    x = torch.randn(32, 16) * 5
    direct, reference = TensorScaler(E5M2), TensorScaler(E5M2)
    for _ in range(3):
        got, got_inv = direct.quantize_operand(x)
        q, want_inv = reference.quantize(x)
        assert torch.equal(got, operand(q)) and torch.equal(got_inv, want_inv)
        direct.update()
        reference.update()


def test_a_machine_that_cannot_compile_runs_the_eager_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("no C++ compiler found\nsecond line")

    fused._probe.cache_clear()
    monkeypatch.setattr(fused, "_compiled", broken)
    try:
        assert not fused.available()
        assert fused.status() == "eager: torch.compile could not build them (RuntimeError: no C++ compiler found)"
        assert not fused.supports(torch.zeros(4))
        scaler = TensorScaler(E4M3)
        got, _ = scaler.quantize_operand(torch.randn(8, 8))  # the eager kernels, same numbers
        assert got.dtype in (torch.bfloat16, torch.float32)
    finally:
        fused._probe.cache_clear()


def _stores(product: torch.Tensor, factor: torch.Tensor, times: int, monkeypatch: pytest.MonkeyPatch, fuse: bool) -> FP8Gradient:
    with monkeypatch.context() as patch:
        if not fuse:
            patch.setattr(fused, "supports", lambda x: False)
        grad = FP8Gradient(torch.device("cpu"))
        for _ in range(times):  # a second write accumulates
            grad.add_product(product.clone(), factor)
    return grad


@pytest.mark.parametrize("times", [1, 2])
@pytest.mark.parametrize("values", ["normal", "zeros", "with_inf", "with_nan"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gradient_store_gives_what_the_eager_kernels_give(
    dtype: torch.dtype, values: str, times: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(2)
    product = (torch.randn(48, 40) * 3).to(dtype)
    if values == "zeros":
        product.zero_()
    elif values != "normal":
        product[3, 5] = float("inf") if values == "with_inf" else float("nan")
    factor = torch.tensor(3.1e-5)
    got = _stores(product, factor, times, monkeypatch, fuse=True)
    want = _stores(product, factor, times, monkeypatch, fuse=False)
    assert got.data is not None and want.data is not None and got.data.dtype == want.data.dtype
    # A NaN step (skipped by the backend) leaves NaN bytes whose sign bit either kernel may set.
    magnitude = 0x7F if values == "with_nan" else 0xFF
    assert torch.equal(got.data.view(torch.uint8) & magnitude, want.data.view(torch.uint8) & magnitude)
    for a, b in ((got.scale_inv, want.scale_inv), (got.step_amax, want.step_amax)):
        assert torch.equal(a, b) or (a.isnan() and b.isnan())
    if values == "normal":
        expected = product.float() * factor * times
        assert torch.allclose(got.dequantize(), expected, rtol=2**-3, atol=1e-9)


def test_gradient_store_takes_a_float32_gradient_as_it_is() -> None:
    grad = FP8Gradient(torch.device("cpu"))
    dw = torch.randn(8, 8)
    grad.add_product(dw.clone(), None)
    assert torch.allclose(grad.dequantize(), dw, rtol=2**-3)


def _o1_losses(monkeypatch: pytest.MonkeyPatch, compute: torch.dtype) -> list[float]:
    """Six O1 steps of a small MLP with the FP8 products computed in ``compute`` on the CPU."""
    from accel import Accelerator, FP8RecipeKwargs
    from accel.backends.native_fp8 import cpu_gemm, gemm, scaling

    with monkeypatch.context() as patch:
        for module in (cpu_gemm, gemm, fused, scaling):
            patch.setattr(module, "compute_dtype", lambda: compute)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.ReLU(), torch.nn.Linear(96, 48))
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        accelerator = Accelerator(
            mixed_precision="fp8", cpu=True,
            kwarg_handlers=[FP8RecipeKwargs(backend="native", optimization_level="O1", base_precision="fp32")],
        )
        model, optimizer = accelerator.prepare(model, optimizer)
        data = torch.randn(64, 48, generator=torch.Generator().manual_seed(1))
        losses = []
        for _ in range(6):
            loss = torch.nn.functional.mse_loss(model(data), data.roll(1, 1))
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return losses


def test_the_float32_path_of_cpus_without_bf16_instructions_trains_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an AVX2-only CPU the FP8 operands are exact float32 copies (the fused kernels write
    float32): the same FP8 values, so the same training up to the products' own rounding."""
    bf16, fp32 = _o1_losses(monkeypatch, torch.bfloat16), _o1_losses(monkeypatch, torch.float32)
    assert fp32[-1] < 0.9 * fp32[0]
    torch.testing.assert_close(fp32, bf16, rtol=2e-2, atol=0)


def test_the_backend_says_when_the_eager_kernels_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from accel import Accelerator, FP8RecipeKwargs

    def describe() -> str:
        handler = FP8RecipeKwargs(backend="native")
        accelerator = Accelerator(mixed_precision="fp8", cpu=True, kwarg_handlers=[handler])
        accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(16, 16)))
        return accelerator.precision.describe()

    assert "eager CPU kernels" not in describe()
    fused._probe.cache_clear()
    monkeypatch.setattr(fused, "_compiled", lambda *args: 1 / 0)
    try:
        assert describe().endswith(", eager CPU kernels)")
    finally:
        fused._probe.cache_clear()


_FIRST_USE = (
    "import torch\n"
    "from accel.backends.native_fp8 import fused\n"
    "fused.quantize_operand(torch.randn(64), torch.tensor(1.0), torch.float8_e4m3fn, torch.float32)\n"
    "fused.quantize_operand(torch.randn(64, dtype=torch.bfloat16), torch.tensor(1.0), torch.float8_e4m3fn, torch.float32)\n"
)


def test_the_first_compile_says_what_it_does_once_and_a_cached_run_says_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("LOCAL_RANK", None)

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", _FIRST_USE], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr

    first = run()
    assert first.count("accel: native FP8 is compiling its fused CPU kernels") == 1, first
    assert str(tmp_path / "inductor") in first
    assert "compiling" not in run()  # both kernels come from the disk cache now
