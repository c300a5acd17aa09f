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


@pytest.fixture(autouse=True)
def fresh_warnings_once() -> None:
    """Each test sees accel's said-once warnings as a fresh process would: which tests ran before it in the
    same worker process (pytest-xdist hands them out as they finish) must not decide whether it warns."""
    from accel import _warnings

    _warnings._given.clear()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the marks into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`-n`, set in pyproject.toml), keep a module's tests on one worker when the
    module has a fixture shared beyond one test (module, class or package scope: a multi-process training run
    whose results several tests read), so that it runs once rather than once per worker; every other test
    is handed out on its own (`--dist loadgroup`)."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures is None:
            continue
        scopes = {definition.scope for definitions in fixtures.name2fixturedefs.values() for definition in definitions}
        if scopes & {"module", "class", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
