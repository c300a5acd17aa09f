"""Stand-ins for TransformerEngine and MS-AMP, and a pretend CUDA FP8 GPU.

TransformerEngine and MS-AMP cannot be installed without CUDA. Their stand-ins (te_standin.py,
msamp_standin.py beside this file, each saying what it checks against the real source and what
differs) are installed into sys.modules by the fixtures here.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import accel.backends.fp8.ao as fp8_ao
import accel.backends.fp8.choice as fp8
import accel.backends.fp8.msamp as fp8_msamp
import accel.backends.fp8.te as fp8_te


def _load_standin(name: str) -> types.ModuleType:
    """`name`.py beside this file (tests are imported with --import-mode=importlib: no package here)."""
    spec = importlib.util.spec_from_file_location(f"accel_tests_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


standin = _load_standin("msamp_standin")
te_standin = _load_standin("te_standin")

# ----------------------------------------------------------------------------- TransformerEngine
FakeTE = te_standin.FakeTE


@pytest.fixture
def fake_te(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A stand-in TransformerEngine factory (te_standin.FakeTE); call `.install(...)` to put one in sys.modules.
    The test fails if accel passed a recipe field that TE's pydantic recipe would have dropped."""
    fake = te_standin.FakeTE(monkeypatch)
    yield fake
    assert not fake.state.dropped, f"keywords TE's recipes would drop silently: {fake.state.dropped}"


# ----------------------------------------------------------------------------- MS-AMP
@pytest.fixture
def fake_msamp(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A stand-in MS-AMP factory (msamp_standin.FakeMSAMP); call `.install()` to put one in sys.modules."""
    return standin.FakeMSAMP(monkeypatch)


# ----------------------------------------------------------------------------- devices
@pytest.fixture
def fp8_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the device is a CUDA GPU with FP8: every capability check that asks says yes."""
    for module in (fp8, fp8_te, fp8_msamp, fp8_ao):
        monkeypatch.setattr(module, "cuda_fp8_reason", lambda device: None)
