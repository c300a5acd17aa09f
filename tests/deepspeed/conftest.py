"""The helpers beside these tests, and the 2-process launcher of tests/distributed/two_processes, are importable by name."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "distributed" / "two_processes"))
