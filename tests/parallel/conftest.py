"""The launcher of tests/distributed/two_processes and the tiny model of tests/fsdp are importable by name."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fsdp"))
sys.path.insert(0, str(HERE.parent / "distributed" / "two_processes"))
