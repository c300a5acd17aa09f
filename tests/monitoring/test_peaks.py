"""The peak FLOP/s MFU is measured against (accel/monitoring/peaks.py)."""

from __future__ import annotations

import pytest
import torch

from accel.monitoring.peaks import device_peak, measured_cpu_peak, table_peak


@pytest.mark.parametrize(
    ("name", "dtype", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989.4e12),
        ("NVIDIA H100 80GB HBM3", torch.float8_e4m3fn, 1978.9e12),
        ("NVIDIA H100 PCIe", torch.float16, 756e12),
        ("NVIDIA H200", torch.bfloat16, 989.4e12),
        ("NVIDIA A100-SXM4-80GB", torch.bfloat16, 312e12),
        ("NVIDIA L4", torch.bfloat16, 121e12),
        ("NVIDIA L40S", torch.bfloat16, 362e12),
        ("NVIDIA B200", torch.float8_e4m3fn, 4500e12),
    ],
)
def test_known_gpus_have_their_dense_peak(name: str, dtype: torch.dtype, peak: float) -> None:
    assert table_peak(name, dtype) == pytest.approx(peak)


def test_unknown_gpus_and_dtypes_have_none() -> None:
    assert table_peak("NVIDIA A100-SXM4-80GB", torch.float8_e4m3fn) is None  # no FP8 tensor cores
    assert table_peak("Some GPU", torch.bfloat16) is None
    assert table_peak("NVIDIA H100 80GB HBM3", torch.float64) is None


def test_fp32_uses_tf32_where_torch_allows_it() -> None:
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert table_peak("NVIDIA H100 80GB HBM3", torch.float32) == pytest.approx(66.9e12)
        torch.set_float32_matmul_precision("high")
        assert table_peak("NVIDIA H100 80GB HBM3", torch.float32) == pytest.approx(494.7e12)
    finally:
        torch.set_float32_matmul_precision(before)


def test_the_cpu_peak_is_measured_once_and_a_configured_one_wins() -> None:
    measured = measured_cpu_peak()
    assert 1e7 < measured < 1e14  # a real rate, from 10 MFLOP/s to 100 TFLOP/s
    assert measured_cpu_peak() == measured
    assert device_peak(torch.device("cpu"), torch.float32, None) == measured
    assert device_peak(torch.device("cpu"), torch.float32, 5e9) == 5e9
