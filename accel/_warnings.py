"""PrecisionWarning, and a way to give a warning once: once per process, and once per launch.

A warning points at the user's line that led to it (the first frame outside accel), not at
accel's own code. Two places say a PrecisionWarning in their own words instead of warning:
- the command line's probes (`accel config`, `accel env`) collect them with
  `collect_precision_warnings` (their menus and reports already mark what is slow);
- `accel launch` says each one once for the whole launch, and passes their digests to its
  processes in `SAID_VARIABLE`, so that no rank repeats what the launcher already said.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from types import FrameType


class PrecisionWarning(UserWarning):
    """Something about the precision the user should know: it runs, but not as well as expected."""


SAID_VARIABLE = "ACCEL_SAID_WARNINGS"
"""Set by `accel launch`: comma-separated digests of the PrecisionWarnings it has said for this launch."""

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_given: set[str] = set()
_collector: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("accel_precision_warnings", default=None)


def warn_once(message: str, category: type[Warning] = PrecisionWarning) -> None:
    """Warn with `message` the first time this process sees it (unless the launcher has said it)."""
    collected = _collector.get()
    if collected is not None and issubclass(category, PrecisionWarning):
        if message not in collected:
            collected.append(message)
        return
    if message in _given:
        return
    _given.add(message)
    if issubclass(category, PrecisionWarning) and digest(message) in said_by_launcher():
        return
    warnings.warn(message, category, stacklevel=_user_stacklevel())


def digest(message: str) -> str:
    """A short stable fingerprint of `message`, for SAID_VARIABLE."""
    return hashlib.sha256(message.encode("utf-8")).hexdigest()[:16]


def said_by_launcher(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The digests of the warnings `accel launch` already said for this launch."""
    environ = os.environ if environ is None else environ
    return frozenset(part for part in environ.get(SAID_VARIABLE, "").split(",") if part)


@contextlib.contextmanager
def collect_precision_warnings() -> Iterator[list[str]]:
    """Within this block PrecisionWarnings are appended to the yielded list instead of being warned.

    They are not remembered as given either, so that a real training run later in the same
    process still warns. For callers that say them in their own words, or show them otherwise.
    """
    found: list[str] = []
    token = _collector.set(found)
    try:
        yield found
    finally:
        _collector.reset(token)


def _user_stacklevel() -> int:
    """The stacklevel for `warnings.warn` in `warn_once` that names the first frame outside accel."""
    frame: FrameType | None = sys._getframe(2)  # 0: this function, 1: warn_once, 2: warn_once's caller
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2
