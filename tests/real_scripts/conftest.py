"""The harness modules beside these tests are importable by name (import mode importlib); the hub
stand-ins are built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from real_script_standins import build_all  # noqa: E402


@pytest.fixture(scope="session")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bert-base-cased/, nyu-mll/glue/, glue/, tiny-clm/, images/ ... (see real_script_standins)."""
    return build_all(tmp_path_factory.mktemp("standins"))
