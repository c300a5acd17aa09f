"""Turning what a script logs into plain Python values, or saying which key cannot be logged."""

from __future__ import annotations

import numbers
from typing import Any

Plain = bool | int | float | str | None


def as_scalar(key: str, value: Any) -> bool | int | float:
    """A number from an int/float, or from a one-element tensor or numpy value (`.item()`).

    Raises TypeError naming `key` for anything else, rather than dropping the value.
    """
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, numbers.Number):
        return float(value)  # type: ignore[arg-type]  # Number declares no __float__; numpy's, Fraction, Decimal have one
    item = getattr(value, "item", None)
    size = getattr(value, "size", None)
    numel = value.numel() if hasattr(value, "numel") else (size if isinstance(size, int) else None)
    if callable(item) and numel == 1:
        result = item()
        if isinstance(result, (bool, int, float)):
            return result
    raise TypeError(
        f"cannot log {key}={value!r} ({type(value).__name__}) as a number: give an int, a float, or a "
        "one-element tensor or numpy value."
    )


def is_scalar(value: Any) -> bool:
    """True for what `as_scalar` accepts (numbers and one-element tensors), False for strings, dicts, ..."""
    if isinstance(value, (str, dict)) or value is None:
        return False
    try:
        as_scalar("", value)
    except TypeError:
        return False
    return True


def plain(key: str, value: Any) -> Any:
    """`value` as JSON-ready data: numbers (tensors via `.item()`), strings, None, lists and dicts of them."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {str(k): plain(f"{key}.{k}", v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(f"{key}[{i}]", v) for i, v in enumerate(value)]
    return as_scalar(key, value)
