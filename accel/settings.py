"""The schema: every setting has one name, from which all its spellings derive.

From `Setting.name` come the YAML key of config.yaml, the `accel launch` flag
(`--name` and `--name-with-hyphens`), and the environment variable `ACCEL_<NAME>` through which
`accel launch` hands the value to the script. `Setting.keyword` is the Accelerator's keyword
argument. The FP8 recipe's settings are derived from the fields of FP8RecipeKwargs: field `f`
is the YAML key `fp8_config: {f: ...}`, the flag `--fp8_f`, the variable `ACCEL_FP8_F` and the
keyword `FP8RecipeKwargs(f=...)`. The quantization settings derive the same way from the fields
of BitsandbytesKwargs (`bnb_config: {mode: ...}`, `--bnb_mode`, ACCEL_BNB_MODE). FSDP's are
Accelerate's keys: `use_fsdp` (an Accelerate config's `distributed_type: FSDP`) and, under
`fsdp_config:`, `fsdp_auto_wrap_policy` and the rest, each also the flag and ACCEL_ variable stem,
with FullyShardedDataParallelPlugin's field as keyword.

A value that cannot be parsed raises ValueError naming where it came from. Torch-free, so that
the command line can share it.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from typing import Any

from accel._validation import check_choice, choice_error
from accel.backends.names import CANONICAL_PRECISIONS, resolve_precision
from accel.kwargs_handlers.bitsandbytes import BNB_MODES, DTYPE_NAMES, BitsandbytesKwargs
from accel.kwargs_handlers.dynamo import DYNAMO_BACKENDS, DYNAMO_MODES
from accel.kwargs_handlers.fp8 import (
    AMAX_COMPUTE_ALGOS,
    BASE_PRECISIONS,
    FP8_BACKENDS,
    FP8_FORMATS,
    OPTIMIZATION_LEVELS,
    SCALINGS,
    FP8RecipeKwargs,
)
from accel.kwargs_handlers.fsdp_names import (
    CONFIG_KEYS,
    FSDP_VERSION_1_REASON,
    FSDP_VERSIONS,
    STATE_DICT_TYPES,
    WRAP_POLICIES,
)

ENV_PREFIX = "ACCEL_"
FP8_SECTION = "fp8_config"
"""The YAML mapping that holds the FP8 recipe."""
RECIPE_PRECISION = "fp8"
"""The precision that reads the fp8_config section."""
FP8_PREFIX = "fp8_"
"""The prefix that turns an FP8RecipeKwargs field into a setting name (flag and env var stem)."""
BNB_SECTION = "bnb_config"
"""The YAML mapping that holds the bitsandbytes quantization options (BitsandbytesKwargs' fields)."""
BNB_PREFIX = "bnb_"
"""The prefix that turns a BitsandbytesKwargs field into a setting name: mode -> --bnb_mode, ACCEL_BNB_MODE."""
FSDP_SECTION = "fsdp_config"
"""The YAML mapping that holds FSDP's options, under Accelerate's keys (fsdp_auto_wrap_policy, ...)."""

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


# ------------------------------------------------------------------ kinds of value
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
    def accepted(self) -> str:  # type: ignore[override]
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
    def accepted(self) -> str:  # type: ignore[override]
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
    def accepted(self) -> str:  # type: ignore[override]
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


# ------------------------------------------------------------------ the setting
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
        """The value from the environment, or the default when the variable is unset."""
        environ = os.environ if environ is None else environ
        text = environ.get(self.env_var)
        return self.default if text is None else self.parse(text, self.env_var)


def _check_recipe_field(field: str, value: Any, source: str) -> Any:
    """Let FP8RecipeKwargs judge one field: its types, ranges and spellings live there, not here."""
    try:
        recipe = FP8RecipeKwargs(**{field: value})
    except (TypeError, ValueError) as error:
        raise ValueError(str(error).replace(f"FP8RecipeKwargs.{field}", source)) from None
    return getattr(recipe, field)


# ------------------------------------------------------------------ the settings
MIXED_PRECISION = Setting(
    "mixed_precision", PrecisionKind(), "no", keyword="mixed_precision",
    help="precision to train in: " + ", ".join(CANONICAL_PRECISIONS) + " (or an alias such as bf16-mixed)",
)
USE_CPU = Setting("use_cpu", BoolKind(), False, keyword="cpu", flag="cpu", help="train on the CPU even if a GPU is present")
GRADIENT_ACCUMULATION_STEPS = Setting(
    "gradient_accumulation_steps", IntKind(minimum=1), 1, keyword="gradient_accumulation_steps",
    help="micro-batches per optimizer step",
)
NUM_PROCESSES = Setting("num_processes", IntKind(minimum=1), 1, help="training processes in all, over all machines")
NUM_MACHINES = Setting("num_machines", IntKind(minimum=1), 1, help="machines taking part")
MACHINE_RANK = Setting("machine_rank", IntKind(minimum=0), 0, help="this machine's index, 0 to num_machines - 1")
MAIN_PROCESS_IP = Setting("main_process_ip", TextKind(), None, help="address of machine 0 (several machines)")
MAIN_PROCESS_PORT = Setting(
    "main_process_port", IntKind(minimum=1, maximum=65535), None,
    help="port on machine 0 for the rendezvous (one machine: a free port when not given)",
)
GPU_IDS = Setting("gpu_ids", GpuIdsKind(), "all", help="GPUs to use on this machine: all, or indices such as 0,1")
COLLECTIVE_TIMEOUT = Setting(
    "collective_timeout", IntKind(minimum=1), None, help="seconds a collective (all-reduce, barrier, ...) waits "
    "for every process before failing (default 1800); InitProcessGroupKwargs(timeout=) in the script wins",
)
RANK_EXIT_GRACE = Setting(
    "rank_exit_grace", IntKind(minimum=1), None,
    help="seconds the other processes may run on after one has exited before accel launch stops them (default 30)",
)

ACCELERATOR_SETTINGS = (MIXED_PRECISION, USE_CPU, GRADIENT_ACCUMULATION_STEPS)
"""Settings the Accelerator reads (keyword, else ACCEL_<NAME>, else default)."""
LAUNCHER_SETTINGS = (NUM_PROCESSES, NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP, MAIN_PROCESS_PORT, GPU_IDS, RANK_EXIT_GRACE)
"""Settings that decide how `accel launch` starts processes."""
TOP_LEVEL_SETTINGS = (
    MIXED_PRECISION, NUM_PROCESSES, NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP, MAIN_PROCESS_PORT,
    USE_CPU, GPU_IDS, GRADIENT_ACCUMULATION_STEPS, COLLECTIVE_TIMEOUT, RANK_EXIT_GRACE,
)
"""Top-level keys of config.yaml, in the order they are written."""

_RECIPE_CHOICES: dict[str, tuple[str, ...]] = {
    "backend": FP8_BACKENDS,
    "fp8_format": FP8_FORMATS,
    "amax_compute_algo": AMAX_COMPUTE_ALGOS,
    "scaling": SCALINGS,
    "optimization_level": OPTIMIZATION_LEVELS,
    "base_precision": BASE_PRECISIONS,
}
"""The accepted values of FP8RecipeKwargs' string fields (for prompts and help; it validates itself)."""


def _recipe_kind(field: str, annotation: Any) -> Kind:
    """The kind of an FP8RecipeKwargs field, from its type annotation."""
    if annotation is bool:
        return BoolKind()
    if annotation is int:
        return IntKind()
    if annotation == tuple[str, ...]:
        return PatternsKind()
    if annotation in (str, str | None) and field in _RECIPE_CHOICES:
        return ChoiceKind(_RECIPE_CHOICES[field], optional=annotation != str)
    raise TypeError(f"FP8RecipeKwargs.{field}: no setting kind for the annotation {annotation!r}")


def _recipe_settings() -> tuple[Setting, ...]:
    """One setting per FP8RecipeKwargs field, under fp8_config in YAML.

    Its name is fp8_<field>, without a doubled prefix: the field fp8_format gives
    `--fp8_format` and ACCEL_FP8_FORMAT (Accelerate's spellings), not ACCEL_FP8_FP8_FORMAT.
    """
    hints = typing.get_type_hints(FP8RecipeKwargs)
    return tuple(
        Setting(
            FP8_PREFIX + field.name.removeprefix(FP8_PREFIX), _recipe_kind(field.name, hints[field.name]), field.default,
            keyword=field.name, section=FP8_SECTION,
        )
        for field in dataclasses.fields(FP8RecipeKwargs)
    )


FP8_SETTINGS = _recipe_settings()
"""The recipe's settings, in FP8RecipeKwargs' field order."""
DYNAMO_SECTION = "dynamo_config"
"""The YAML mapping that holds torch.compile's settings (Accelerate's name and keys)."""
DYNAMO_BACKEND = Setting(
    "dynamo_backend", ChoiceKind(DYNAMO_BACKENDS), "no", keyword="dynamo_backend", section=DYNAMO_SECTION,
    help="compile prepared models with torch.compile and this backend (no: do not compile; inductor: torch's compiler)",
)
DYNAMO_MODE = Setting(
    "dynamo_mode", ChoiceKind(DYNAMO_MODES), "default", section=DYNAMO_SECTION,
    help="torch.compile mode (inductor only): " + ", ".join(DYNAMO_MODES),
)
DYNAMO_USE_FULLGRAPH = Setting(
    "dynamo_use_fullgraph", BoolKind(), False, section=DYNAMO_SECTION,
    help="compile each model as one graph: raise at a graph break instead of splitting there",
)
DYNAMO_USE_DYNAMIC = Setting(
    "dynamo_use_dynamic", BoolKind(), None, section=DYNAMO_SECTION,
    help="compile for dynamic shapes (true) or static ones (false); unset lets torch decide",
)
DYNAMO_SETTINGS = (DYNAMO_BACKEND, DYNAMO_MODE, DYNAMO_USE_FULLGRAPH, DYNAMO_USE_DYNAMIC)
"""torch.compile's settings, under dynamo_config in YAML; TorchDynamoPlugin's fields backend, mode,
fullgraph and dynamic (read by the Accelerator where the script leaves them unset)."""
DYNAMO_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in DYNAMO_SETTINGS}
USE_FSDP = Setting(
    "use_fsdp", BoolKind(), False,
    help="shard models with FSDP2 (torch's fully_shard) instead of DDP; the fsdp_config keys say how "
    "(an Accelerate config's distributed_type: FSDP)",
)
_FSDP_HELP = {
    "fsdp_version": "2: torch's fully_shard (FSDP2); 1 (FSDP1) is refused",
    "fsdp_auto_wrap_policy": "which submodules become sharded units: " + ", ".join(WRAP_POLICIES)
    + " (empty: the root only)",
    "fsdp_transformer_layer_cls_to_wrap": "transformer_based_wrap: block class names, comma-separated "
    "(empty: the model's _no_split_modules)",
    "fsdp_min_num_params": "size_based_wrap: parameters a submodule needs to become a unit (default 100000000)",
    "fsdp_reshard_after_forward": "free gathered parameters after each unit's forward (less memory, one more "
    "all-gather)",
    "fsdp_offload_params": "keep sharded parameters, gradients and optimizer state in CPU memory",
    "fsdp_state_dict_type": "how save_state writes the model: " + ", ".join(STATE_DICT_TYPES),
    "fsdp_activation_checkpointing": "recompute each unit's activations in backward instead of keeping them",
    "fsdp_cpu_ram_efficient_loading": "load the weights on process 0 only (not implemented: true is refused)",
}
_FSDP_KINDS: dict[str, tuple[Kind, Any]] = {
    "fsdp_version": (FsdpVersionKind(), 2),
    "fsdp_auto_wrap_policy": (ChoiceKind(WRAP_POLICIES, optional=True), None),
    "fsdp_transformer_layer_cls_to_wrap": (NamesKind(), None),
    "fsdp_min_num_params": (IntKind(minimum=1), None),
    "fsdp_reshard_after_forward": (BoolKind(), True),
    "fsdp_offload_params": (BoolKind(), False),
    "fsdp_state_dict_type": (ChoiceKind(STATE_DICT_TYPES), "SHARDED_STATE_DICT"),
    "fsdp_activation_checkpointing": (BoolKind(), False),
    "fsdp_cpu_ram_efficient_loading": (BoolKind(), False),
}
"""Each fsdp_config key's kind and default (FullyShardedDataParallelPlugin's defaults)."""
FSDP_OPTION_SETTINGS = tuple(
    Setting(key, *_FSDP_KINDS[key], keyword=field, help=_FSDP_HELP[key], section=FSDP_SECTION)
    for key, field in CONFIG_KEYS.items()
)
"""The fsdp_config keys: YAML key, flag stem and ACCEL_ variable are Accelerate's key; keyword is the plugin's field."""
FSDP_SETTINGS = (USE_FSDP, *FSDP_OPTION_SETTINGS)
FSDP_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in FSDP_OPTION_SETTINGS}


def _bnb_settings() -> tuple[Setting, ...]:
    """One setting per BitsandbytesKwargs field, under bnb_config in YAML: mode -> --bnb_mode, ACCEL_BNB_MODE."""
    kinds: dict[str, Kind] = {"mode": ChoiceKind(BNB_MODES), "dtype": DtypeKind(), "ignore_modules": PatternsKind()}
    return tuple(
        Setting(BNB_PREFIX + field.name, kinds[field.name], field.default, keyword=field.name, section=BNB_SECTION)
        for field in dataclasses.fields(BitsandbytesKwargs)
    )


BNB_SETTINGS = _bnb_settings()
"""The quantization settings, in BitsandbytesKwargs' field order; setting any of them turns quantization on."""
BNB_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in BNB_SETTINGS}
ALL_SETTINGS = TOP_LEVEL_SETTINGS + FP8_SETTINGS + DYNAMO_SETTINGS + FSDP_SETTINGS + BNB_SETTINGS
SETTINGS_BY_NAME = {setting.name: setting for setting in ALL_SETTINGS}
FP8_SETTINGS_BY_KEY = {setting.yaml_key: setting for setting in FP8_SETTINGS}
assert set(_RECIPE_CHOICES) <= set(FP8_SETTINGS_BY_KEY), "a choice list names no FP8RecipeKwargs field"


def fp8_recipe_from_env(environ: Mapping[str, str] | None = None) -> FP8RecipeKwargs | None:
    """The FP8 recipe set by ACCEL_FP8_* variables, or None when none is set.

    Only the variables that are set become arguments, so `explicit_fields` names exactly
    what the user configured. An invalid value raises ValueError naming the variable.
    """
    environ = os.environ if environ is None else environ
    given = {
        setting.yaml_key: setting.parse(environ[setting.env_var], setting.env_var)
        for setting in FP8_SETTINGS
        if setting.env_var in environ
    }
    return FP8RecipeKwargs(**given) if given else None


def to_environment(values: Mapping[str, Any]) -> dict[str, str]:
    """The ACCEL_* variables for `values` (setting name -> canonical value); None values are left out."""
    return {
        SETTINGS_BY_NAME[name].env_var: SETTINGS_BY_NAME[name].format(value)
        for name, value in values.items()
        if value is not None
    }



def fsdp_fields_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """FullyShardedDataParallelPlugin's arguments from ACCEL_USE_FSDP and ACCEL_FSDP_*, or None when
    ACCEL_USE_FSDP is not true. Only the variables that are set become arguments."""
    environ = os.environ if environ is None else environ
    if not USE_FSDP.from_env(environ):
        return None
    return {s.keyword: s.parse(environ[s.env_var], s.env_var) for s in FSDP_OPTION_SETTINGS if s.env_var in environ}


def bnb_options_from_env(environ: Mapping[str, str] | None = None) -> BitsandbytesKwargs | None:
    """The BitsandbytesKwargs set by ACCEL_BNB_* variables, or None when none is set."""
    environ = os.environ if environ is None else environ
    given = {s.keyword: s.parse(environ[s.env_var], s.env_var) for s in BNB_SETTINGS if s.env_var in environ}
    return BitsandbytesKwargs(**given) if given else None
