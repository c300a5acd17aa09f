"""Power-of-two scales, stochastic rounding to float16, and the fast FP8 upcasts."""

from __future__ import annotations

import math

import pytest
import torch

from accel.backends.native_fp8.cpu_gemm import cpu_scaled_mm, to_bfloat16
from accel.backends.native_fp8.gemm import torch_scaled_mm_on_cpu
from accel.backends.native_fp8 import fused
from accel.backends.native_fp8.rounding import (
    fp8_to_float, half_to_float, hashed_bits, pow2_scale, random_keys, random_low_bits, round_to_fp8, round_to_half,
)

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
EVERY_BYTE = torch.arange(256, dtype=torch.uint8)


@pytest.mark.parametrize("amax", [1e-30, 3e-4, 0.25, 0.3, 1.0, 7.0, 3e5])
def test_pow2_scale_puts_the_amax_in_the_top_binade_below_2_to_15(amax: float) -> None:
    scale = pow2_scale(torch.tensor(amax)).item()
    assert math.log2(scale).is_integer()
    assert 2.0**14 < amax * scale <= 2.0**15


@pytest.mark.parametrize("amax", [0.0, math.inf, math.nan])
def test_pow2_scale_is_one_for_zero_or_non_finite_amax(amax: float) -> None:
    assert pow2_scale(torch.tensor(amax)).item() == 1.0


def test_stochastic_rounding_is_unbiased_and_round_to_nearest_is_not() -> None:
    x = torch.full((200_000,), 1.0 + 2.0**-13)  # an eighth of float16's ulp above 1
    generator = torch.Generator().manual_seed(0)
    rounded = round_to_half(x.clone(), generator).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2.0**-10}
    assert rounded.mean().item() - 1.0 == pytest.approx(2.0**-13, rel=0.02)
    assert round_to_half(x.clone(), None).float().mean().item() == 1.0


@pytest.mark.parametrize("dtype", FP8)
def test_stochastic_rounding_to_fp8_is_unbiased(dtype: torch.dtype) -> None:
    x = torch.full((200_000,), 3.1)  # between the FP8 neighbours 3.0 and 3.5 (E4M3) or 3.0 (E5M2)
    rounded = round_to_fp8(x.clone(), dtype, 448.0, torch.Generator().manual_seed(0)).float()
    assert rounded.unique().numel() == 2
    assert rounded.mean().item() == pytest.approx(3.1, rel=2e-3)
    assert round_to_fp8(x.clone(), dtype, 448.0, None).float().unique().tolist() == [3.0]


def test_stochastic_rounding_leaves_representable_values_alone() -> None:
    x = torch.randn(10_000).half().float()
    assert torch.equal(round_to_half(x.clone(), torch.Generator().manual_seed(1)).float(), x)


def test_half_to_float_is_exact_for_power_of_two_scales() -> None:
    stored = torch.randn(100).half()
    assert torch.equal(half_to_float(stored, torch.tensor(2.0**-20)), stored.double().mul(2.0**-20).float())


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_upcasts_are_exact_for_every_finite_byte(dtype: torch.dtype) -> None:
    q = EVERY_BYTE.view(dtype)
    expected = q.float()
    finite = torch.isfinite(expected)
    assert torch.equal(fp8_to_float(q, torch.tensor(1.0))[finite], expected[finite])
    assert torch.equal(to_bfloat16(q).float()[finite], expected[finite])
    transposed = EVERY_BYTE.reshape(16, 16).view(dtype).t()
    assert to_bfloat16(transposed).stride() == transposed.stride()


def test_a_nan_scale_makes_every_upcast_value_nan() -> None:
    q = torch.randn(8).to(torch.float8_e4m3fn)
    assert torch.isnan(fp8_to_float(q, torch.tensor(math.nan))).all()


@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(FP8[0], FP8[0]), (FP8[1], FP8[0])])
def test_the_cpu_product_matches_torchs_scaled_mm(a_dtype: torch.dtype, b_dtype: torch.dtype) -> None:
    a = (torch.randn(48, 64) * 4).to(a_dtype)
    b = (torch.randn(32, 64) * 4).to(b_dtype)
    scale_a, scale_b = torch.tensor(0.5), torch.tensor(0.125)
    expected = torch_scaled_mm_on_cpu(a, b.t(), scale_a, scale_b, torch.float32)
    actual = cpu_scaled_mm(a, b.t(), scale_a, scale_b, torch.float32)
    assert ((actual - expected).norm() / expected.norm()).item() < 4e-3  # bf16 rounding of the product


def test_random_bits_are_uniform_and_every_bit_is_fair() -> None:
    bits = random_low_bits(1 << 20, 13, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert bits.dtype == torch.int32 and int(bits.min()) == 0 and int(bits.max()) == 8191
    counts = torch.bincount(bits, minlength=8192).double()
    chi2_per_dof = float(((counts - counts.mean()) ** 2 / counts.mean()).sum()) / 8191
    assert 0.95 < chi2_per_dof < 1.05  # a uniform sample: 1 +- 0.016 (one sigma)
    full = hashed_bits(1 << 20, torch.tensor([5, -7], dtype=torch.int32), 32)
    for bit in range(32):
        assert abs(float(((full >> bit) & 1).double().mean()) - 0.5) < 0.003  # 6 sigma


def test_random_bits_of_different_keys_and_neighbouring_elements_are_unrelated() -> None:
    generator = torch.Generator().manual_seed(1)
    a, b = (random_low_bits(1 << 18, 16, generator, torch.device("cpu")).double() for _ in range(2))
    assert not torch.equal(a, b)
    assert abs(float(torch.corrcoef(torch.stack((a, b)))[0, 1])) < 0.01
    assert abs(float(torch.corrcoef(torch.stack((a[1:], a[:-1])))[0, 1])) < 0.01
    # keys differing in one bit, or by a shift of the counter, give unrelated sequences too
    keys = torch.tensor([1000, 2000], dtype=torch.int32)
    base = hashed_bits(4096 + 17, keys, 32)
    assert not torch.equal(hashed_bits(4096, keys + torch.tensor([17, 0], dtype=torch.int32), 32), base[17:])
    assert int((hashed_bits(4096, keys ^ torch.tensor([0, 1], dtype=torch.int32), 32) == base[:4096]).sum()) < 5


def test_one_draw_per_tensor_from_the_generator() -> None:
    """The bits depend on the generator's state only through one draw: the same state, the same bits."""
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    first = random_low_bits(1000, 20, generator, torch.device("cpu"))
    generator.set_state(state)
    keys = random_keys(generator)
    assert torch.equal(first, hashed_bits(1000, keys, 20))
    assert torch.equal(first[:10], hashed_bits(10, keys, 20))  # element i depends on i, not on the count


@pytest.mark.skipif(not fused.available(), reason=f"fused kernels: {fused.status()}")
@pytest.mark.parametrize("count", [1, 7, 17, 100_003])
def test_compiled_random_bits_are_the_eager_bits(count: int) -> None:
    """Inside a fused kernel (vectorized loop and scalar tail) the hash gives the eager bits exactly."""
    kernel = fused.compile_kernel(
        lambda values, keys: (hashed_bits(values.numel(), keys, 32), hashed_bits(values.numel(), keys, 13).float()),
        [torch.zeros(16), torch.zeros(2, dtype=torch.int32)],
    )
    for keys in ([0, 0], [-(2**31), 2**31 - 1], [123456789, -987654321]):
        key_tensor = torch.tensor(keys, dtype=torch.int32)
        full, low = kernel(torch.zeros(count), key_tensor)
        assert torch.equal(full, hashed_bits(count, key_tensor, 32))
        assert torch.equal(low, hashed_bits(count, key_tensor, 13).float())
