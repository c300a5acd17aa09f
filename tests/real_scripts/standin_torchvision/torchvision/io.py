"""`torchvision.io`, empty in the torchvision stand-in: transformers imports it at import time and uses
it only for what the fixtures never run (see torchvision/_missing.py)."""

from __future__ import annotations

from typing import NoReturn

from torchvision._missing import missing


def __getattr__(name: str) -> NoReturn:
    missing(__name__, name)
