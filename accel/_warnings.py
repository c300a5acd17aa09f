"""PrecisionWarning, and a way to give a warning once per process."""

from __future__ import annotations

import warnings


class PrecisionWarning(UserWarning):
    """Something about the precision the user should know: it runs, but not as well as expected."""


_given: set[str] = set()


def warn_once(message: str, category: type[Warning] = PrecisionWarning) -> None:
    """Warn with `message` the first time this process sees it."""
    if message in _given:
        return
    _given.add(message)
    warnings.warn(message, category, stacklevel=3)
