"""Shared fixtures: a clean ACCEL_* environment for every test; `tests/` importable for helpers."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import zygote  # noqa: E402  (from tests/, put on the path above)


def pytest_configure(config: pytest.Config) -> None:
    """In each process that runs tests, start the warm interpreter that the suite's subprocesses fork from
    (tests/zygote.py says what it does and what it keeps from a fresh one); `TESTS_ZYGOTE=off` runs every
    subprocess on a fresh interpreter."""
    runs_tests = hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)
    if not runs_tests or os.environ.get("TESTS_ZYGOTE") == "off" or config.option.collectonly:
        return
    zygotes = zygote.Zygotes()
    zygotes.start()
    zygote.RUNNING.append(zygotes)
    sys.executable = zygotes.client


def pytest_collection_finish(session: pytest.Session) -> None:
    """Set aside what collection built (every test module, and what it imported: torch, transformers, ...)
    from the garbage collector: a full collection in a test (`free_memory`, `find_executable_batch_size`)
    then walks only what tests made since, not the whole worker (0.5 s a collection here, 20 to 30 at a time)."""
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the warm interpreters and give `sys.executable` back."""
    for zygotes in zygote.RUNNING:
        zygotes.stop()
        sys.executable = zygote.REAL_PYTHON
    zygote.RUNNING.clear()


@pytest.fixture(autouse=True)
def fresh_interpreter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked `fresh_interpreter` starts its subprocesses on the real interpreter (with what a fresh
    one loads and how it starts: a test of imports or start-up time), not on the warm one."""
    if request.node.get_closest_marker("fresh_interpreter"):
        monkeypatch.setattr(sys, "executable", zygote.REAL_PYTHON)


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
