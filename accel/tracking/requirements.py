"""Which tracking libraries are installed, and the pip command that installs a missing one."""

from __future__ import annotations

import importlib.util


def installed(module: str) -> bool:
    """True when `module` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def install_hint(extra: str, packages: str) -> str:
    """The command that installs a tracker's libraries: accel's extra, or the plain packages."""
    return f'pip install "accel[{extra}]" (or: pip install {packages})'
