"""The Accelerator's settings: one name each, from which the keyword, YAML key and env var derive.

`ACCEL_<NAME>` is read when the keyword argument is absent (None). A value that cannot be
parsed raises, naming the variable. Torch-free, so that the command line can share it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from accel._validation import check_int
from accel.backends.names import resolve_precision

ENV_PREFIX = "ACCEL_"

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


def parse_positive_int(text: str, source: str) -> int:
    """Parse an integer >= 1."""
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{source}={text!r} is not an integer; it must be an int >= 1.") from None
    return check_int(source, value, minimum=1)


def parse_precision(text: str, source: str) -> str:
    """Parse a precision name into its canonical form."""
    return resolve_precision(text, source)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its name (the YAML key), the Accelerator keyword, and how to parse text."""

    name: str
    keyword: str
    default: Any
    parse: Callable[[str, str], Any]

    @property
    def env_var(self) -> str:
        """The environment variable that carries this setting to a launched script."""
        return ENV_PREFIX + self.name.upper()

    def from_env(self, environ: Mapping[str, str] | None = None) -> Any:
        """The value from the environment, or the default when the variable is unset."""
        environ = os.environ if environ is None else environ
        text = environ.get(self.env_var)
        return self.default if text is None else self.parse(text, self.env_var)


MIXED_PRECISION = Setting("mixed_precision", "mixed_precision", "no", parse_precision)
USE_CPU = Setting("use_cpu", "cpu", False, parse_bool)
GRADIENT_ACCUMULATION_STEPS = Setting(
    "gradient_accumulation_steps", "gradient_accumulation_steps", 1, parse_positive_int
)

ACCELERATOR_SETTINGS = (MIXED_PRECISION, USE_CPU, GRADIENT_ACCUMULATION_STEPS)
