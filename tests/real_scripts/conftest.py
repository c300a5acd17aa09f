"""The harness modules beside these tests are importable by name (import mode importlib); the hub
stand-ins are built once per session, and so is the warm interpreter holding the scripts' libraries."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import zygote  # noqa: E402
from real_script_standins import build_all  # noqa: E402


@pytest.fixture(scope="session")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bert-base-cased/, nyu-mll/glue/, glue/, tiny-clm/, images/ ... (see real_script_standins)."""
    return build_all(tmp_path_factory.mktemp("standins"))


@pytest.fixture(scope="session")
def hf_zygote() -> Iterator[None]:
    """The test zygote that has imported transformers, datasets, evaluate and diffusers (tests/zygote.py),
    started in this pytest process when a real script first runs; its caches stay in each run's folder."""
    for zygotes in zygote.RUNNING:
        zygotes.start("hf")
    yield
    for zygotes in zygote.RUNNING:
        leaked = Path(zygotes.folder, ".hf")
        assert not leaked.exists(), f"a library made HF_HOME=.hf absolute in the zygote: {sorted(leaked.rglob('*'))[:5]}"
