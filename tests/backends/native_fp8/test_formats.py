"""FP8 formats and the saturating cast."""

from __future__ import annotations

import math

import pytest
import torch

from accel.backends.native_fp8.formats import (
    E4M3,
    E5M2,
    cast_to_fp8,
    choice_error,
    format_dtypes,
    fp8_is_zero,
    fp8_max,
)

INF = math.inf


def test_fp8_max_matches_torch_finfo() -> None:
    assert fp8_max(E4M3) == 448.0 == torch.finfo(E4M3).max
    assert fp8_max(E5M2) == 57344.0 == torch.finfo(E5M2).max


def test_fp8_max_rejects_other_dtypes() -> None:
    with pytest.raises(ValueError, match=r"dtype=torch.float16 is not an FP8 training dtype"):
        fp8_max(torch.float16)


def test_format_dtypes() -> None:
    assert format_dtypes("HYBRID") == (E4M3, E5M2)
    assert format_dtypes("E4M3") == (E4M3, E4M3)


def test_format_dtypes_rejects_pure_e5m2_with_reason() -> None:
    with pytest.raises(ValueError, match=r"fp8_format='E5M2' is not supported: pure E5M2"):
        format_dtypes("E5M2")


def test_format_dtypes_names_value_accepted_and_closest() -> None:
    with pytest.raises(ValueError) as info:
        format_dtypes("hybrid")
    message = str(info.value)
    assert "fp8_format='hybrid'" in message
    assert "['HYBRID', 'E4M3']" in message
    assert "did you mean 'HYBRID'?" in message


def test_choice_error_without_close_match() -> None:
    message = str(choice_error("scaling", "zzz", ("delayed", "current")))
    assert message == "scaling='zzz' is not supported; accepted: ['delayed', 'current']"


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_cast_saturates_out_of_range_and_infinities(dtype: torch.dtype) -> None:
    limit = fp8_max(dtype)
    x = torch.tensor([2 * limit, -2 * limit, 1e30, INF, -INF])
    q = cast_to_fp8(x, torch.tensor(1.0), dtype)
    assert q.dtype == dtype
    assert q.float().tolist() == [limit, -limit, limit, limit, -limit]


def test_cast_e5m2_gives_max_where_a_plain_cast_may_give_inf() -> None:
    x = torch.tensor([1e5, -1e5])
    assert cast_to_fp8(x, torch.tensor(1.0), E5M2).float().tolist() == [57344.0, -57344.0]


def test_cast_keeps_nan() -> None:
    q = cast_to_fp8(torch.tensor([math.nan, 1.0]), torch.tensor(1.0), E4M3)
    assert math.isnan(q[0].float().item())
    assert q[1].float().item() == 1.0


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_cast_multiplies_by_the_scale_exactly(dtype: torch.dtype) -> None:
    x = torch.tensor([0.25, -1.5, 3.0, 0.0])
    q = cast_to_fp8(x, torch.tensor(4.0), dtype)
    assert q.float().tolist() == [1.0, -6.0, 12.0, 0.0]


def test_cast_rounds_to_nearest_representable() -> None:
    # E4M3 between 1 and 2 has steps of 1/8; 1.06 rounds to 1.0, 1.07 to 1.125.
    q = cast_to_fp8(torch.tensor([1.06, 1.07]), torch.tensor(1.0), E4M3)
    assert q.float().tolist() == [1.0, 1.125]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cast_from_half_precision(dtype: torch.dtype) -> None:
    x = torch.tensor([1.0, -2.0, 1000.0], dtype=dtype)
    q = cast_to_fp8(x, torch.tensor(2.0), E4M3)
    assert q.float().tolist() == [2.0, -4.0, 448.0]


def test_cast_of_transposed_input_is_row_major() -> None:
    x = torch.randn(32, 16).t()
    q = cast_to_fp8(x, torch.tensor(1.0), E4M3)
    assert q.is_contiguous()
    assert torch.equal(q.float(), x.to(E4M3).float())


def test_cast_leaves_input_unchanged() -> None:
    x = torch.tensor([1000.0, -1.0])
    cast_to_fp8(x, torch.tensor(3.0), E4M3)
    assert x.tolist() == [1000.0, -1.0]


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_fp8_is_zero_sees_both_zeros_only(dtype: torch.dtype) -> None:
    q = torch.tensor([0.0, -0.0, 1e-12, 1.0, -2.0]).to(dtype)
    assert fp8_is_zero(q).tolist() == [True, True, True, False, False]
