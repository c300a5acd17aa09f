"""Helpers that turn bad input into one clear error message.

Every message names the argument, the value it got, what is accepted and, for a choice,
the closest accepted value. Nothing here imports torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, NoReturn


def closest(value: object, accepted: Iterable[str]) -> str | None:
    """The accepted value most like `value`, or None when nothing is close."""
    matches = difflib.get_close_matches(str(value).lower(), [a.lower() for a in accepted], n=1)
    if not matches:
        return None
    by_lower = {a.lower(): a for a in accepted}
    return by_lower[matches[0]]


def choice_error(argument: str, value: object, accepted: Iterable[str], hint: str = "") -> ValueError:
    """A ValueError for `value` not being one of `accepted`."""
    accepted = list(accepted)
    message = f"{argument}={value!r} is not accepted; accepted values: {', '.join(map(repr, accepted))}."
    guess = closest(value, accepted)
    if guess is not None:
        message += f" Did you mean {guess!r}?"
    if hint:
        message += f" {hint}"
    return ValueError(message)


def check_choice(argument: str, value: Any, accepted: Iterable[str], *, case_sensitive: bool = False) -> str:
    """Return the canonical spelling of `value` among `accepted`, or raise."""
    accepted = list(accepted)
    if isinstance(value, str):
        for option in accepted:
            if value == option or (not case_sensitive and value.lower() == option.lower()):
                return option
    raise choice_error(argument, value, accepted)


def check_int(argument: str, value: Any, *, minimum: int | None = None) -> int:
    """Return `value` if it is an int (not a bool) no smaller than `minimum`, or raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument}={value!r} must be an int, not {type(value).__name__}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"{argument}={value!r} must be an int >= {minimum}.")
    return value


def check_bool(argument: str, value: Any) -> bool:
    """Return `value` if it is a bool, or raise."""
    if not isinstance(value, bool):
        raise TypeError(f"{argument}={value!r} must be True or False, not {type(value).__name__}.")
    return value


def fail(message: str) -> NoReturn:
    """Raise a ValueError with `message` (for checks that do not fit the helpers above)."""
    raise ValueError(message)
