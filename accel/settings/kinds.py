"""The kinds of value a setting holds (accel/settings/setting.py): how each is checked, parsed from text
(an environment variable, a flag) and written back as text. Each raises ValueError naming where
the value came from. Torch-free, so that the command line can share it."""

from __future__ import annotations

import dataclasses
from typing import Any

from accel._validation import check_choice, choice_error
from accel.backends.names import CANONICAL_PRECISIONS, resolve_precision
from accel.kwargs_handlers.bitsandbytes import DTYPE_NAMES
from accel.kwargs_handlers.fsdp_names import FSDP_VERSION_1_REASON, FSDP_VERSIONS

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def parse_bool(text: str, source: str) -> bool:
    """Parse a boolean written as 1/0, true/false, yes/no or on/off (any case)."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{source}={text!r} is not a boolean; accepted: {', '.join(_TRUE + _FALSE[:-1])}.")


def _rejected(source: str, value: object, accepted: str) -> ValueError:
    return ValueError(f"{source}={value!r} is not accepted; accepted: {accepted}.")


class Kind:
    """How the values of one kind of setting are checked, parsed from text and written as text.

    `from_text` turns text (an environment variable, a flag) into a typed value; `check` turns
    a typed value (from YAML, Python or `from_text`) into the canonical one. Both raise
    ValueError naming `source`.
    """

    accepted: str = "any value"
    choices: tuple[str, ...] = ()

    def check(self, value: Any, source: str) -> Any:
        """The canonical form of `value`, or ValueError."""
        return value

    def from_text(self, text: str, source: str) -> Any:
        """The typed value written as `text`, or ValueError when it is not of this kind."""
        return text

    def format(self, value: Any) -> str:
        """`value` as the text that `parse` reads back."""
        return str(value)


@dataclasses.dataclass(frozen=True)
class IntKind(Kind):
    """An int (never a bool) within [minimum, maximum]."""

    minimum: int | None = None
    maximum: int | None = None

    @property
    def accepted(self) -> str:  # type: ignore[override]  # a property over Kind's class attribute; nothing assigns it
        if self.minimum is not None and self.maximum is not None:
            return f"an int from {self.minimum} to {self.maximum}"
        return "an int" if self.minimum is None else f"an int >= {self.minimum}"

    def check(self, value: Any, source: str) -> int:
        too_low = self.minimum is not None and isinstance(value, int) and value < self.minimum
        too_high = self.maximum is not None and isinstance(value, int) and value > self.maximum
        if isinstance(value, bool) or not isinstance(value, int) or too_low or too_high:
            raise ValueError(f"{source}={value!r} must be {self.accepted}.")
        return value

    def from_text(self, text: str, source: str) -> int:
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{source}={text!r} is not an integer; it must be {self.accepted}.") from None


@dataclasses.dataclass(frozen=True)
class FloatKind(Kind):
    """A number (int or float, never a bool) of at least `minimum`; canonical: a float."""

    minimum: float = 0.0

    @property
    def accepted(self) -> str:  # type: ignore[override]  # a property over Kind's class attribute; nothing assigns it
        return f"a number >= {self.minimum:g}"

    def check(self, value: Any, source: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < self.minimum:
            raise ValueError(f"{source}={value!r} must be {self.accepted}.")
        return float(value)

    def from_text(self, text: str, source: str) -> float:
        try:
            return float(text.strip())
        except ValueError:
            raise ValueError(f"{source}={text!r} is not a number; it must be {self.accepted}.") from None

    def format(self, value: Any) -> str:
        return f"{value:g}"


class BoolKind(Kind):
    """True or False; as text 1/0, true/false, yes/no, on/off."""

    accepted = "true or false"

    def check(self, value: Any, source: str) -> bool:
        if not isinstance(value, bool):
            raise _rejected(source, value, self.accepted)
        return value

    def from_text(self, text: str, source: str) -> bool:
        return parse_bool(text, source)

    def format(self, value: Any) -> str:
        return "true" if value else "false"


class PrecisionKind(Kind):
    """A precision name in any accepted spelling, made canonical."""

    accepted = ", ".join(CANONICAL_PRECISIONS)
    choices = tuple(CANONICAL_PRECISIONS)

    def check(self, value: Any, source: str) -> str:
        return resolve_precision(value, source)


@dataclasses.dataclass(frozen=True)
class ChoiceKind(Kind):
    """One of `choices` (case-insensitive); None too when `optional`."""

    choices: tuple[str, ...] = ()
    optional: bool = False

    @property
    def accepted(self) -> str:  # type: ignore[override]  # a property over Kind's class attribute; nothing assigns it
        return ", ".join(self.choices) + (" (or empty for the default)" if self.optional else "")

    def check(self, value: Any, source: str) -> str | None:
        if value is None and self.optional:
            return None
        return check_choice(source, value, self.choices)

    def from_text(self, text: str, source: str) -> str | None:
        stripped = text.strip()
        return None if self.optional and stripped.lower() in ("", "none") else stripped

    def format(self, value: Any) -> str:
        return "" if value is None else str(value)


@dataclasses.dataclass(frozen=True)
class TextKind(Kind):
    """A non-empty string without spaces (a host name or address); None too when `optional`."""

    optional: bool = True
    accepted: str = "a host name or IP address"

    def check(self, value: Any, source: str) -> str | None:
        if value is None and self.optional:
            return None
        if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
            raise _rejected(source, value, self.accepted)
        parts = value.strip().split(".")
        if len(parts) == 4 and all(part.isdigit() for part in parts) and any(int(part) > 255 for part in parts):
            raise _rejected(source, value, "an IPv4 address (four numbers of 0 to 255) or a host name")
        return value.strip()


class GpuIdsKind(Kind):
    """'all', or GPU indices: a list, one int, or comma-separated text. Canonical: 'all' or '0,1'."""

    accepted = "'all' or comma-separated GPU indices such as 0,1"

    def check(self, value: Any, source: str) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if isinstance(value, str):
            if value.strip().lower() == "all":
                return "all"
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, (list, tuple)) and value and all(_is_index(v) for v in value):
            return ",".join(str(int(v)) for v in value)
        raise _rejected(source, value, self.accepted)


def _is_index(value: object) -> bool:
    if isinstance(value, str):
        return value.isdigit()
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class PatternsKind(Kind):
    """A tuple of strings; as text, comma-separated."""

    accepted = "a list of strings (comma-separated as text)"

    def check(self, value: Any, source: str) -> tuple[str, ...]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise _rejected(source, value, self.accepted)
        return tuple(value)

    def from_text(self, text: str, source: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in text.split(",") if part.strip())

    def format(self, value: Any) -> str:
        return ",".join(value)


class NamesKind(Kind):
    """Class names: a list, or one comma-separated string (as Accelerate writes them); None when unset."""

    accepted = "class names: a list, or comma-separated text such as Block,DecoderLayer"

    def check(self, value: Any, source: str) -> tuple[str, ...] | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) and v for v in value):
            raise _rejected(source, value, self.accepted)
        return tuple(value)

    def from_text(self, text: str, source: str) -> tuple[str, ...] | None:
        return None if text.strip().lower() in ("", "none") else self.check(text, source)

    def format(self, value: Any) -> str:
        return "" if value is None else ",".join(value)


class FsdpVersionKind(IntKind):
    """fsdp_version: 2 only; 1 is refused with the reason (accel runs FSDP2)."""

    @property
    def accepted(self) -> str:  # type: ignore[override]  # a property over Kind's class attribute; nothing assigns it
        return " or ".join(map(str, FSDP_VERSIONS))

    def check(self, value: Any, source: str) -> int:
        if value == 1 and not isinstance(value, bool):
            raise ValueError(f"{source}=1 is refused: {FSDP_VERSION_1_REASON}. Set it to 2 (or leave it out).")
        if isinstance(value, bool) or value not in FSDP_VERSIONS:
            raise _rejected(source, value, self.accepted)
        return value


class DtypeKind(Kind):
    """A floating dtype's name in any accepted spelling (bf16, bfloat16, torch.bfloat16), made torch's name."""

    accepted = "float16, bfloat16 or float32 (or fp16, bf16, fp32; empty for the precision's)"
    choices = ("float16", "bfloat16", "float32")

    def check(self, value: Any, source: str) -> str | None:
        if value is None:
            return None
        name = value.strip().lower().removeprefix("torch.") if isinstance(value, str) else None
        if name not in DTYPE_NAMES:
            raise choice_error(source, value, self.choices)
        return DTYPE_NAMES[name]

    def from_text(self, text: str, source: str) -> str | None:
        return None if text.strip().lower() in ("", "none") else text

    def format(self, value: Any) -> str:
        return "" if value is None else str(value)


class BlocksKind(Kind):
    """Which blocks: True (found in the model), False (none), or class names (a list or comma-separated text)."""

    accepted = "true (the model's repeated blocks), false, or class names such as Block,DecoderLayer"

    def check(self, value: Any, source: str) -> bool | tuple[str, ...]:
        if isinstance(value, bool):
            return value
        try:
            names = NamesKind().check(value, source)
        except ValueError:
            raise _rejected(source, value, self.accepted) from None
        return names if names else False

    def from_text(self, text: str, source: str) -> bool | tuple[str, ...]:
        lowered = text.strip().lower()
        return parse_bool(lowered, source) if lowered in _TRUE + _FALSE else self.check(text, source)

    def format(self, value: Any) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else ",".join(value)


class CheckpointPolicyKind(Kind):
    """How blocks are checkpointed: "full", "selective", or a memory budget: a number from 0 to 1 (the fraction of
    the blocks whose activations are kept; 0 is "full")."""

    accepted = "full, selective, or a memory budget from 0 to 1 (such as 0.5)"

    def check(self, value: Any, source: str) -> str | float:
        if isinstance(value, str) and value.strip().lower() in ("full", "selective"):
            return value.strip().lower()
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _rejected(source, value, self.accepted)
        return float(value)

    def from_text(self, text: str, source: str) -> str | float:
        try:
            return self.check(float(text), source)
        except ValueError:
            return self.check(text, source)

    def format(self, value: Any) -> str:
        return value if isinstance(value, str) else f"{value:g}"
