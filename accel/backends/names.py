"""The precision vocabulary: one resolver for accel's and Lightning's spellings.

Torch-free, so that the command line can validate a precision without importing torch.
"""

from __future__ import annotations

from accel._validation import choice_error

CANONICAL_PRECISIONS: dict[str, tuple[str, ...]] = {
    "no": ("fp32", "32", "32-true"),
    "fp16": ("16-mixed", "16"),
    "bf16": ("bf16-mixed",),
    "fp8": (),
    "16-true": (),
    "bf16-true": (),
    "64-true": ("64",),
}
"""Canonical name -> the other spellings accepted for it (case-insensitive)."""

_LOOKUP = {
    spelling: canonical
    for canonical, others in CANONICAL_PRECISIONS.items()
    for spelling in (canonical, *others)
}


def resolve_precision(value: object, argument: str = "mixed_precision") -> str:
    """The canonical name of the precision `value` (a string such as 'BF16-mixed', or 16/32/64)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value.strip().lower() in _LOOKUP:
        return _LOOKUP[value.strip().lower()]
    raise choice_error(argument, value, list(_LOOKUP))
