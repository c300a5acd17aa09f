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


class ArgumentTypeError(TypeError, ValueError):
    """A value of the wrong kind (a str where a bool belongs, say).

    A TypeError, as Python's convention has it, and also a ValueError, as Accelerate's
    configuration objects raise for the same mistake: a script's `except ValueError` and
    `except TypeError` both catch it. Every check below raises it for a wrong kind, and a plain
    ValueError for a value of the right kind that is out of range.
    """


def check_int(argument: str, value: Any, *, minimum: int | None = None, or_none: bool = False) -> int:
    """Return `value` if it is an int (not a bool) no smaller than `minimum`, or raise.

    `or_none=True` only words the message for a field that also accepts None (the caller lets
    None through before calling).

    >>> check_int("num_steps", 4, minimum=1)
    4
    """
    bound = "an int" if minimum is None else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        alternative = " or None" if or_none else ""
        raise ArgumentTypeError(f"{argument}={value!r} must be {bound}{alternative}, not {type(value).__name__}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"{argument}={value!r} must be {bound}.")
    return value


def check_bool(argument: str, value: Any) -> bool:
    """Return `value` if it is a bool, or raise.

    >>> check_bool("even_batches", True)
    True
    """
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{argument}={value!r} must be True or False, not {type(value).__name__}.")
    return value


def check_optional_bool(argument: str, value: Any) -> bool | None:
    """Return `value` if it is a bool or None, or raise.

    >>> check_optional_bool("dispatch_batches", None) is None
    True
    """
    if value is not None and not isinstance(value, bool):
        raise ArgumentTypeError(f"{argument}={value!r} must be True, False or None, not {type(value).__name__}.")
    return value


def fail(message: str) -> NoReturn:
    """Raise a ValueError with `message` (for checks that do not fit the helpers above)."""
    raise ValueError(message)
