"""backend='auto': the first FP8 backend that can run here, in DESIGN.md's order, and why not the others."""

from __future__ import annotations

from typing import Any

import logging

import pytest
import torch

import accel.backends.fp8.ao as fp8_ao
from accel import Accelerator, FP8RecipeKwargs
from accel.backends.fp8.choice import fp8_backend_status
from accel.cli import capabilities


def auto_accelerator() -> Accelerator:
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(use_autocast_during_eval=True)])


def test_on_this_cpu_auto_takes_native_and_says_why_not_the_others(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="accel"):
        accelerator = auto_accelerator()
    selection = accelerator.precision.selection
    assert accelerator.precision.library == "native"
    assert selection.startswith("FP8 backend 'native' chosen by auto (the device is cpu, not a CUDA GPU with FP8")
    assert "te: TransformerEngine is not installed" in selection
    assert "ao: can run here, but auto takes it only on a CUDA GPU with FP8; ask for backend='ao'" in selection
    assert "msamp: MS-AMP is not installed" in selection
    assert [r.getMessage() for r in caplog.records].count(selection) == 1


def test_on_an_fp8_gpu_with_transformer_engine_auto_takes_te(fake_te: Any, fp8_gpu: Any) -> None:
    fake_te.install()
    accelerator = auto_accelerator()
    assert accelerator.precision.library == "te"
    assert accelerator.precision.selection == "FP8 backend 'te' chosen by auto"


def test_on_an_fp8_gpu_without_te_auto_takes_ao_and_says_why_not_te(fp8_gpu: Any) -> None:
    pytest.importorskip("torchao.float8", reason="torchao is not installed (pip install torchao)")
    accelerator = auto_accelerator()
    assert accelerator.precision.library == "ao"
    assert accelerator.precision.selection.startswith(
        "FP8 backend 'ao' chosen by auto (te: TransformerEngine is not installed (install it")


def test_then_msamp_then_native(fake_msamp: Any, fp8_gpu: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(fp8_ao.TorchAOFP8, "availability", classmethod(lambda cls, device: "torchao is not installed"))
    fake_msamp.install()
    accelerator = auto_accelerator()
    assert accelerator.precision.library == "msamp"
    assert "ao: torchao is not installed" in accelerator.precision.selection
    monkeypatch.delitem(__import__("sys").modules, "msamp")
    accelerator = auto_accelerator()
    assert accelerator.precision.library == "native"
    assert "msamp: MS-AMP is not installed" in accelerator.precision.selection


def test_a_named_backend_that_cannot_run_is_never_replaced() -> None:
    message = "backend='msamp'\\) cannot run here: MS-AMP is not installed.*the device is cpu.*will not run another"
    with pytest.raises(RuntimeError, match=message):
        Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="msamp")])


def test_wizard_and_env_use_the_backends_own_checks() -> None:
    cpu = torch.device("cpu")
    status = fp8_backend_status(cpu)
    assert capabilities.fp8_backend_status(cpu) == {name: status[name] for name in ("native", "te", "ao", "msamp")}
    assert list(capabilities.fp8_backend_status()) == ["native", "te", "ao", "msamp"]
    assert status["native"] is None and status["te"].startswith("TransformerEngine is not installed")
