"""Accelerate's environment helpers: `patch_environment`, `clear_environment`, `write_basic_config`,
`purge_accelerate_environment`, `convert_dict_to_env_variables` and `check_os_kernel`."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import platform
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])

logger = logging.getLogger("accelerate.utils.environment")
"""Accelerate's logger name, not accel's: scripts and tests that configure or capture that logger
(`assertLogs("accelerate.utils.environment")`) keep seeing these warnings."""

_PURGED_PREFIXES = ("ACCELERATE_", "ACCEL_")
"""The environment variables `purge_accelerate_environment` restores: Accelerate's and accel's own."""

_PURGE_MARK = "_accelerate_is_purged_environment_wrapped"
"""Set on a wrapped function, so that a method inherited by a decorated subclass is wrapped once."""

_MIN_KERNEL = (5, 5, 0)
"""The oldest Linux kernel Accelerate recommends (older ones can make the processes hang)."""


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
    from accel.cli.config.command import machine_defaults
    from accel.cli.config.file import config_path, render, write_atomically

    path = Path(save_location) if save_location is not None else config_path(None)[0]
    if path.exists():
        return False
    values = {**machine_defaults(gpu_count()), "mixed_precision": resolve_precision(mixed_precision)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, render(values))
    return path


def convert_dict_to_env_variables(current_env: dict[str, str]) -> list[str]:
    """`current_env` as lines "KEY=value\\n" (for an environment file), in its order. An item whose
    key or value is empty or contains a forbidden character (";", newline, "<", ">", space) is left
    out with a warning, so that the file cannot run commands or break its lines."""
    forbidden = (";", "\n", "<", ">", " ")
    lines = []
    for key, value in current_env.items():
        if key and value and not any(char in key + value for char in forbidden):
            lines.append(f"{key}={value}\n")
        else:
            logger.warning(f"WARNING: Skipping {key}={value} as it contains forbidden characters or missing values.")
    return lines


def check_os_kernel() -> None:
    """Warn (on the main process) when running on a Linux kernel older than 5.5.0, which can make
    distributed processes hang; on other systems, or an unparsable release, do nothing."""
    info = platform.uname()
    if info.system != "Linux":
        return
    found = re.search(r"\d+\.\d+\.\d+", info.release)
    if found is None:
        return
    version = found.group(0)
    if tuple(int(part) for part in version.split(".")) < _MIN_KERNEL:
        from accel.logging import get_logger

        get_logger(logger.name).warning(
            f"Detected kernel version {version}, which is below the recommended minimum of 5.5.0; this "
            "can cause the process to hang. It is recommended to upgrade the kernel to the minimum version or higher.",
            main_process_only=True,
        )


@contextlib.contextmanager
def _restored_accelerate_variables() -> Iterator[None]:
    """Run the block; afterwards every ACCELERATE_*/ACCEL_* variable has its earlier value again,
    and those the block added are removed (other variables are left as the block made them)."""
    earlier = {key: value for key, value in os.environ.items() if key.startswith(_PURGED_PREFIXES)}
    try:
        yield
    finally:
        for key in [key for key in os.environ if key.startswith(_PURGED_PREFIXES)]:
            if key not in earlier:
                del os.environ[key]
        os.environ.update(earlier)


def _purging(function: Callable[..., _T]) -> Callable[..., _T]:
    """`function` run inside `_restored_accelerate_variables`."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> _T:
        with _restored_accelerate_variables():
            return function(*args, **kwargs)

    setattr(wrapper, _PURGE_MARK, True)
    return wrapper


def _purge_test_methods(cls: type) -> None:
    """Wrap each `test*` method of `cls` (inherited ones included) with `_purging`, once."""
    for name in dir(cls):
        if not name.startswith("test"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, (staticmethod, classmethod)):
            if not getattr(raw.__func__, _PURGE_MARK, False):
                setattr(cls, name, type(raw)(_purging(raw.__func__)))
        elif callable(raw) and not getattr(raw, _PURGE_MARK, False):
            setattr(cls, name, _purging(raw))


def purge_accelerate_environment(func_or_cls: _F) -> _F:
    """Decorator: the ACCELERATE_* (and accel's ACCEL_*) environment variables a call sets are
    undone when it returns or raises; those that existed get their values back.

    Some code sets such variables and leaves them (transformers' `TrainingArguments(fp16=True)`
    sets ACCELERATE_MIXED_PRECISION), which then overrides later settings, tests' especially.
    On a function it wraps the function. On a class (a unittest.TestCase or a pytest class) it
    wraps every method whose name starts with "test", and those of its subclasses when they are
    defined. As in Accelerate, setUp/tearDown are not wrapped: what setUp sets stays for the
    test that follows it (wrapping setUp alone would undo it before the test runs).
    """
    if not isinstance(func_or_cls, type):
        return cast(_F, _purging(func_or_cls))  # functools.wraps keeps the function's signature
    cls: type[Any] = func_or_cls
    _purge_test_methods(cls)
    previous = vars(cls).get("__init_subclass__")

    def init_subclass(subclass: type, **kwargs: Any) -> None:
        if previous is not None:
            previous.__get__(None, subclass)(**kwargs)
        else:
            super(cls, subclass).__init_subclass__(**kwargs)
        _purge_test_methods(subclass)

    cls.__init_subclass__ = classmethod(init_subclass)  # type: ignore[assignment]  # replaced on purpose
    return func_or_cls
