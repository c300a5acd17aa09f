"""Shared fixtures: a clean ACCEL_* environment for every test; `tests/` importable for helpers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def clean_accel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ACCEL_* variable from the developer's shell leaks into a test (nor Accelerate's launcher variables,
    ACCELERATE_* and FSDP_*, which accel reads too)."""
    for name in list(os.environ):
        if name.startswith(("ACCEL_", "ACCELERATE_", "FSDP_")):
            monkeypatch.delenv(name)
    yield
