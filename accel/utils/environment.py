"""Accelerate's environment helpers: `patch_environment`, `clear_environment`, `write_basic_config`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set environment variables (names upper-cased, values turned into str) inside the block;
    afterwards each is restored to its earlier value, or removed if it had none."""
    earlier = {}
    for key, value in kwargs.items():
        name = key.upper()
        earlier[name] = os.environ.get(name)
        os.environ[name] = str(value)
    try:
        yield
    finally:
        for name, value in earlier.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Run the block with an empty environment; the whole environment comes back afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def write_basic_config(mixed_precision: str = "no", save_location: str | Path | None = None) -> Path | bool:
    """Write `accel config default`'s configuration with `mixed_precision` to `save_location` (default:
    the file `accel launch` reads); return its path, or False when a file is already there (as
    Accelerate, which does not overwrite)."""
    from accel.backends.names import resolve_precision
    from accel.cli.capabilities import gpu_count
    from accel.cli.config_command import machine_defaults
    from accel.cli.config_file import config_path, render, write_atomically

    path = Path(save_location) if save_location is not None else config_path(None)[0]
    if path.exists():
        return False
    values = {**machine_defaults(gpu_count()), "mixed_precision": resolve_precision(mixed_precision)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, render(values))
    return path
