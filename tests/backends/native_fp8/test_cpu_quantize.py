"""Quantizing straight to the CPU GEMM operand: bit for bit what the FP8 cast and upcast give."""

from __future__ import annotations

import pytest
import torch

from accel.backends.native_fp8.cpu_gemm import to_bfloat16
from accel.backends.native_fp8.cpu_quantize import WORK_DTYPE, quantize_operand, supports
from accel.backends.native_fp8.formats import E4M3, E5M2, cast_to_fp8, fp8_max
from accel.backends.native_fp8.gemm import operand
from accel.backends.native_fp8.rounding import fp8_to_float
from accel.backends.native_fp8.scaling import TensorScaler

SCALES = (1.0, 3.7, 2.0**-20, 2.0**20, 448 / 3.3e-5)
"""1.0 gives every product the dtype holds; the others check that the product is rounded as the cast rounds it."""


def every_pattern(dtype: torch.dtype) -> torch.Tensor:
    """Every 16-bit pattern as ``dtype`` (ties, subnormals, infinities, NaNs, both zeros), and 3 more
    values, so that the length is no multiple of a vector width."""
    bits = torch.arange(-(2**15), 2**15 + 3, dtype=torch.int32).to(torch.int16)
    return bits.view(dtype)


def today(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, out_dtype: torch.dtype) -> torch.Tensor:
    """The operand the FP8 cast and the exact upcast give (cpu_gemm.upcast, for either compute dtype)."""
    q = cast_to_fp8(x, scale, fp8_dtype)
    if out_dtype == torch.bfloat16:
        return to_bfloat16(q)
    return fp8_to_float(q, torch.ones(()))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("dtype", sorted(WORK_DTYPE, key=str))
def test_bit_identical_to_cast_and_upcast_for_every_pattern(
    dtype: torch.dtype, fp8_dtype: torch.dtype, out_dtype: torch.dtype
) -> None:
    x = every_pattern(dtype)
    nan = x.isnan()
    int_view = torch.int16 if out_dtype == torch.bfloat16 else torch.int32
    for value in SCALES:
        scale = torch.tensor(value)
        got = quantize_operand(x, scale, fp8_dtype, out_dtype)
        want = today(x, scale, fp8_dtype, out_dtype)
        assert got.dtype == out_dtype
        mismatched = (got.view(int_view) != want.view(int_view)) & ~nan
        assert not mismatched.any(), (value, x[mismatched][:8].tolist(), got[mismatched][:8].tolist())
        # NaN (only in a step that is skipped) stays NaN or saturates; the upcast reads FP8's NaN byte.
        assert (got[nan].isnan() | got[nan].abs().eq(fp8_max(fp8_dtype))).all()


def test_signed_zeros_subnormals_and_saturation() -> None:
    x = torch.tensor([-0.0, 0.0, -(2.0**-11), 2.0**-9, 3 * 2.0**-10, 464.0, -1e30, float("-inf")], dtype=torch.bfloat16)
    got = quantize_operand(x, torch.tensor(1.0), E4M3, torch.bfloat16)
    # -2**-11 rounds to -0; 3 * 2**-10 is a tie between subnormals 2**-9 and 2**-8: to even (2**-8)
    assert got.tolist() == [0.0, 0.0, 0.0, 2.0**-9, 2.0**-8, 448.0, -448.0, -448.0]
    assert torch.signbit(got).tolist() == [True, False, True, False, False, False, True, True]


def test_strided_input_comes_out_row_major() -> None:
    w = torch.randn(48, 80).to(torch.float16)
    scale = torch.tensor(5.0)
    got = quantize_operand(w.t(), scale, E4M3, torch.bfloat16)
    assert got.is_contiguous()
    assert torch.equal(got, today(w.t(), scale, E4M3, torch.bfloat16))


def test_supports_16_bit_cpu_tensors_only() -> None:
    assert supports(torch.zeros(2, dtype=torch.bfloat16)) and supports(torch.zeros(2, dtype=torch.float16))
    assert not supports(torch.zeros(2)) and not supports(torch.zeros(2, dtype=torch.float64))
    assert not supports(torch.zeros(2, dtype=torch.bfloat16, device="meta"))


@pytest.mark.parametrize("count_stats", [False, True])
def test_scaler_operand_matches_operand_of_quantize(count_stats: bool) -> None:
    torch.manual_seed(0)
    x = (torch.randn(64, 32) * 30).to(torch.bfloat16)
    kwargs = {"scaling": "current", "count_stats": count_stats}
    direct, reference = TensorScaler(E5M2, **kwargs), TensorScaler(E5M2, **kwargs)
    for step in range(3):  # the scale changes with each amax
        y = x * (step + 1)
        got, got_inv = direct.quantize_operand(y)
        q, want_inv = reference.quantize(y)
        assert torch.equal(got, operand(q)) and torch.equal(got_inv, want_inv)
        assert torch.equal(direct.step_amax, reference.step_amax)
        direct.update()
        reference.update()
    assert torch.equal(direct.scale, reference.scale)
    if count_stats:  # statistics read the FP8 bytes: counted as by quantize
        assert torch.equal(direct.last_flushed, reference.last_flushed)
