"""The slow-dtype check that decides the bf16/fp16-on-CPU warning."""

from __future__ import annotations

import pytest
import torch

from accel.backends import capability


def test_no_reason_off_cpu_or_for_fp32() -> None:
    assert capability.slow_dtype_reason(torch.device("cuda"), torch.bfloat16) is None
    assert capability.slow_dtype_reason(torch.device("cpu"), torch.float32) is None


def test_reason_follows_onednn_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capability, "_cpu_has_fast_path", lambda dtype: False)
    reason = capability.slow_dtype_reason(torch.device("cpu"), torch.bfloat16)
    assert reason is not None and "AVX512-BF16 or AMX-BF16" in reason and "100x slower" in reason
    monkeypatch.setattr(capability, "_cpu_has_fast_path", lambda dtype: True)
    assert capability.slow_dtype_reason(torch.device("cpu"), torch.bfloat16) is None


def test_the_probe_answers_on_this_machine() -> None:
    assert isinstance(capability._cpu_has_fast_path(torch.bfloat16), bool)
