"""The helper modules and scripts beside these tests are importable by name (import mode importlib)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
