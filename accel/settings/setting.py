"""One setting, and how all its spellings derive from its one name.

From `Setting.name` come the YAML key of config.yaml, the `accel launch` flag
(`--name` and `--name-with-hyphens`), and the environment variable `ACCEL_<NAME>` through which
`accel launch` hands the value to the script. `Setting.keyword` is the Accelerator's keyword
argument. A setting inside a YAML `section` keeps its name as flag and variable stem; in the
fp8_config and bnb_config sections its YAML key is its handler's field (`keyword`).

Accelerate's launcher hands some settings over under its own names (`Setting.accelerate_env_var`,
derived in accel/settings/accelerate_names.py). `Setting.from_env` reads either; when both are set and their
values differ it refuses, naming both.

A value that cannot be parsed raises ValueError naming where it came from; the kinds of value
(how each is checked and parsed) are in accel/settings/kinds.py, and every setting accel has is in
accel/settings/catalogue.py. Torch-free, so that the command line can share it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.settings.accelerate_names import accelerate_variable
from accel.settings.kinds import Kind

ENV_PREFIX = "ACCEL_"
"""The prefix of the variables through which `accel launch` hands each setting to a script."""
FP8_SECTION = "fp8_config"
"""The YAML mapping that holds the FP8 recipe."""
BNB_SECTION = "bnb_config"
"""The YAML mapping that holds the bitsandbytes quantization options (BitsandbytesKwargs' fields)."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its name (YAML key and flag/env stem), kind, default and keyword.

    `keyword` is the Accelerator's keyword argument (or, for a recipe setting, the
    FP8RecipeKwargs field); empty for a setting only the launcher uses. `flag` overrides the
    flag's stem where another spelling is established (`--cpu` for use_cpu). A recipe setting
    has no `help`: its field's docstring in FP8RecipeKwargs says what it means.
    """

    name: str
    kind: Kind
    default: Any
    keyword: str = ""
    help: str = ""
    flag: str | None = None
    section: str | None = None

    @property
    def env_var(self) -> str:
        """The environment variable that carries this setting to a launched script."""
        return ENV_PREFIX + self.name.upper()

    @property
    def accelerate_env_var(self) -> str | None:
        """The variable through which `accelerate launch` hands this setting to a script, where Accelerate's
        Accelerator reads one: ACCELERATE_<NAME>, or for an fsdp_config key FSDP's own FSDP_<KEY>."""
        return accelerate_variable(self.name, self.section)

    @property
    def flags(self) -> tuple[str, ...]:
        """The `accel launch` option strings: underscore spelling first, then hyphens."""
        stem = self.flag or self.name
        hyphens = stem.replace("_", "-")
        return (f"--{stem}",) if hyphens == stem else (f"--{stem}", f"--{hyphens}")

    @property
    def yaml_key(self) -> str:
        """The key in config.yaml (inside `section`: the handler's field for a recipe or bnb setting)."""
        return self.keyword if self.section in (FP8_SECTION, BNB_SECTION) else self.name

    @property
    def yaml_path(self) -> str:
        """The key as a user reads it in messages: 'num_processes' or 'fp8_config.margin'."""
        return f"{self.section}.{self.yaml_key}" if self.section else self.yaml_key

    def check(self, value: Any, source: str) -> Any:
        """The canonical form of a typed value (YAML, Python), or ValueError naming `source`."""
        if self.section == FP8_SECTION:
            return _check_recipe_field(self.yaml_key, value, source)
        return self.kind.check(value, source)

    def parse(self, text: str, source: str) -> Any:
        """The canonical value written as `text` (env var, flag), or ValueError naming `source`."""
        return self.check(self.kind.from_text(text, source), source)

    def format(self, value: Any) -> str:
        """`value` as the text of its environment variable."""
        return self.kind.format(value)

    def from_env(self, environ: Mapping[str, str] | None = None) -> Any:
        """The value from the environment (ACCEL_<NAME>, else Accelerate's variable), or the default when unset."""
        found = self.lookup(environ)
        return self.default if found is None else found[1]

    def lookup(self, environ: Mapping[str, str] | None = None) -> tuple[str, Any] | None:
        """(the variable that sets this setting, its parsed value), or None when neither ACCEL_<NAME> nor
        Accelerate's variable is set. Both set to different values: ValueError naming both.

        Example: with ACCELERATE_MIXED_PRECISION=bf16 (from `accelerate launch --mixed_precision bf16`),
        `MIXED_PRECISION.lookup()` is `("ACCELERATE_MIXED_PRECISION", "bf16")`.
        """
        environ = os.environ if environ is None else environ
        ours = self._parsed(environ, self.env_var)
        theirs = self._parsed(environ, self.accelerate_env_var)
        if ours is not None and theirs is not None and ours[1] != theirs[1]:
            raise ValueError(
                f"{self.env_var}={environ[self.env_var]!r} and {theirs[0]}={environ[theirs[0]]!r} are both set and "
                f"disagree ({ours[1]!r} against {theirs[1]!r}): {theirs[0]} comes from `accelerate launch` (or your "
                f"environment), {self.env_var} from `accel launch` (or your environment). Unset one of them, or give "
                "them the same value."
            )
        return ours or theirs

    def _parsed(self, environ: Mapping[str, str], variable: str | None) -> tuple[str, Any] | None:
        if variable is None or variable not in environ:
            return None
        return variable, self.parse(environ[variable], variable)


def _check_recipe_field(field: str, value: Any, source: str) -> Any:
    """Let FP8RecipeKwargs judge one field: its types, ranges and spellings live there, not here."""
    try:
        recipe = FP8RecipeKwargs(**{field: value})
    except (TypeError, ValueError) as error:
        raise ValueError(str(error).replace(f"FP8RecipeKwargs.{field}", source)) from None
    return getattr(recipe, field)
