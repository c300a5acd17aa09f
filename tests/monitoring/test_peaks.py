"""The peak FLOP/s MFU is measured against (accel/monitoring/peaks.py)."""

from __future__ import annotations

import pytest
import torch

from accel.monitoring import cpu_peak, peaks
from accel.monitoring.peaks import device_peak, measured_cpu_peak, table_peak, utilization


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


def test_the_cpu_peak_is_measured_once_per_dtype_and_a_configured_one_wins() -> None:
    measured = measured_cpu_peak()
    assert measured is not None and 1e7 < measured < 1e14  # a real rate, from 10 MFLOP/s to 100 TFLOP/s
    assert measured_cpu_peak() == measured
    assert device_peak(torch.device("cpu"), torch.float32, None) == measured
    assert device_peak(torch.device("cpu"), torch.float32, 5e9) == 5e9
    # one core's rate times torch's threads (at most the physical cores)
    threads = min(torch.get_num_threads(), cpu_peak.physical_cores())
    assert measured == pytest.approx(cpu_peak.core_rate(torch.float32) * threads)


def test_fp8_on_the_cpu_is_measured_as_what_it_runs_in_and_other_dtypes_have_no_peak() -> None:
    fp8 = cpu_peak.cpu_peak(torch.float8_e4m3fn)
    assert fp8 == max(cpu_peak.cpu_peak(torch.bfloat16) or 0.0, cpu_peak.cpu_peak(torch.float32) or 0.0)
    assert cpu_peak.cpu_peak(torch.int8) is None


def test_measuring_again_keeps_the_best_and_leaves_the_random_stream_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_peak, "_core_rates", {torch.float32: 1e15})  # a best no measurement reaches
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert cpu_peak.core_rate(torch.float32, measure_again=True) == 1e15
    assert torch.equal(torch.rand(3), expected)


def test_no_mfu_above_one_a_low_cpu_peak_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_peak, "_core_rates", {torch.float32: 1.0})  # as if measured on a starved core
    cpu = torch.device("cpu")
    mfu = utilization(1e9, cpu, torch.float32, None)  # 1 GFLOP/s: above that peak, below any real one
    assert mfu is not None and 0 < mfu < 1
    assert cpu_peak.core_rate(torch.float32) > 1e8  # measured again, the real rate kept


def test_no_mfu_above_one_a_rate_above_the_peak_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peaks, "_said_unknown", set())
    cpu = torch.device("cpu")
    with pytest.warns(UserWarning, match=r"MFU left out \(unknown\): 2 TFLOP/s .*peak_flops"):
        assert utilization(2e12, cpu, torch.float32, 1e12) is None
    assert utilization(0.5e12, cpu, torch.float32, 1e12) == 0.5
    h100 = torch.device("cuda")  # the table's peak: a rate above it is unknown too
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    with pytest.warns(UserWarning, match="the cuda peak"):
        assert utilization(2000e12, h100, torch.bfloat16, None) is None
    assert utilization(494.7e12, h100, torch.bfloat16, None) == pytest.approx(0.5)


def test_a_peak_measured_again_in_vain_is_not_measured_at_every_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peaks, "_said_unknown", set())
    monkeypatch.setattr(cpu_peak, "_core_rates", {torch.float32: 1.0})
    measured: list[torch.dtype] = []
    monkeypatch.setattr(cpu_peak, "_measure_core_rate", lambda dtype: measured.append(dtype) or 1.0)  # stays low
    cpu = torch.device("cpu")
    with pytest.warns(UserWarning, match="MFU left out"):
        assert utilization(1e9, cpu, torch.float32, None) is None
    assert utilization(1e9, cpu, torch.float32, None) is None  # the next window: no warning, no measurement
    assert measured == [torch.float32]
