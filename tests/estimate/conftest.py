"""tests/estimate's scripts and the launcher of tests/distributed/two_processes are importable by name."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "distributed" / "two_processes"))
