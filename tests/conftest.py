"""Shared fixtures: a clean ACCEL_* environment for every test; `tests/` importable for helpers."""

from __future__ import annotations

import os
from collections.abc import Iterator

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def clean_accel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ACCEL_* variable from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("ACCEL_"):
            monkeypatch.delenv(name)
    yield
