"""Fixtures of the checkpoint tests: the helper modules next to this file importable, and a
fork server that starts training processes without paying for `import torch` each time."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from checkpoint_processes import ForkServer  # noqa: E402


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()
