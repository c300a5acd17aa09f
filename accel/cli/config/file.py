"""config.yaml: where it lives, how it is read and checked against the schema, and how it is written.

A loaded config is a flat dict: setting name -> canonical value, holding only the keys the file
sets. Every problem is a CliError naming the file (and the key, the value, what is accepted).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel._validation import closest
from accel.cli.config import from_accelerate as accelerate_config
from accel.cli.errors import CliError
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.settings import (
    BNB_SECTION,
    BNB_SETTINGS,
    BNB_SETTINGS_BY_KEY,
    DEEPSPEED_OPTION_SETTINGS,
    DEEPSPEED_SECTION,
    DEEPSPEED_SETTINGS_BY_KEY,
    DYNAMO_SECTION,
    DYNAMO_SETTINGS,
    DYNAMO_SETTINGS_BY_KEY,
    FP8_SECTION,
    FP8_SETTINGS,
    FP8_SETTINGS_BY_KEY,
    FSDP_OPTION_SETTINGS,
    FSDP_SECTION,
    FSDP_SETTINGS_BY_KEY,
    PARALLELISM_SECTION,
    PARALLELISM_SETTINGS,
    PARALLELISM_SETTINGS_BY_KEY,
    TOP_LEVEL_SETTINGS,
    USE_DEEPSPEED,
    USE_FSDP,
    Setting,
)
from accel.settings.environment import CONFIG_FILE_VARIABLE

_TOP_LEVEL = {setting.yaml_key: setting for setting in (*TOP_LEVEL_SETTINGS, USE_FSDP, USE_DEEPSPEED)}
_SECTIONS: dict[str, tuple[str, dict[str, Setting]]] = {
    FSDP_SECTION: ("FSDP options (Accelerate's fsdp_* keys)", FSDP_SETTINGS_BY_KEY),
    BNB_SECTION: ("BitsandbytesKwargs fields", BNB_SETTINGS_BY_KEY),
    DYNAMO_SECTION: ("torch.compile settings (Accelerate's dynamo_* keys)", DYNAMO_SETTINGS_BY_KEY),
    PARALLELISM_SECTION: ("ParallelismConfig sizes (Accelerate's parallelism_config_* keys)", PARALLELISM_SETTINGS_BY_KEY),
    DEEPSPEED_SECTION: ("DeepSpeed options (Accelerate's deepspeed_config keys)", DEEPSPEED_SETTINGS_BY_KEY),
}
"""Mappings of config.yaml read key by key through their settings: what each holds, and its settings by key."""


@dataclasses.dataclass(frozen=True)
class ConfigFile:
    """The active config file: where it is, why that path, and what it sets (empty when absent)."""

    path: Path
    chosen_by: str
    values: dict[str, Any]
    exists: bool


def config_path(flag: str | None, environ: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The config file's path and what chose it: --config_file, else $ACCEL_CONFIG_FILE, else the default."""
    environ = os.environ if environ is None else environ
    if flag:
        return Path(flag).expanduser(), "--config_file"
    if environ.get(CONFIG_FILE_VARIABLE):
        return Path(environ[CONFIG_FILE_VARIABLE]).expanduser(), f"${CONFIG_FILE_VARIABLE}"
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "accel" / "config.yaml", "the default location"


def active_config(flag: str | None, command: str, planning: bool = False) -> ConfigFile:
    """Load the active config. A file named explicitly must exist; the default one may be absent.

    `planning`: for a job planned here but run elsewhere (estimate-memory, launch --dry_run): an Accelerate
    config's GPU layout is not checked against this machine's GPUs."""
    path, chosen_by = config_path(flag)
    if not path.exists():
        if chosen_by != "the default location":
            raise CliError(f"config file {path} (named by {chosen_by}) does not exist")
        return ConfigFile(path, chosen_by, {}, exists=False)
    return ConfigFile(path, chosen_by, load_config(path, command, planning), exists=True)


def load_config(path: Path, command: str, planning: bool = False) -> dict[str, Any]:
    """Read, parse and check `path`; an Accelerate config is mapped first (one warning for what is dropped).
    `planning`: see active_config."""
    data = _read_yaml(path)
    if accelerate_config.looks_like_accelerate(data):
        data = accelerate_config.translate(data, path, command, (lambda: 1) if planning else None)
    return _check_mapping(data, path)


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read config file {path}: {getattr(error, 'strerror', None) or error}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CliError(_yaml_error_line(path, error)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a mapping of settings (key: value lines), found a {type(data).__name__}")
    return data


def _yaml_error_line(path: Path, error: Any) -> str:
    """'file:line:column: YAML syntax error: problem' from a yaml.YAMLError."""
    mark = getattr(error, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{where}: YAML syntax error: {problem}"


def _check_mapping(data: Mapping[Any, Any], path: Path) -> dict[str, Any]:
    """Turn the file's mapping into setting name -> canonical value, refusing unknown keys and bad values."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == FP8_SECTION:
            values.update(_check_recipe(value, path))
            continue
        if key in _SECTIONS:
            values.update(_check_section(key, value, path))
            continue
        setting = _TOP_LEVEL.get(key) if isinstance(key, str) else None
        if setting is None:
            raise _unknown_key(path, key, [*_TOP_LEVEL, FP8_SECTION, *_SECTIONS])
        _store(values, setting, value, path)
    return values


def _check_recipe(section: Any, path: Path) -> dict[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise CliError(f"{path}: {FP8_SECTION} must be a mapping of FP8 recipe fields, not {section!r}")
    values: dict[str, Any] = {}
    for key, value in section.items():
        canonical = FP8RecipeKwargs.aliases.get(key, key) if isinstance(key, str) else key
        setting = FP8_SETTINGS_BY_KEY.get(canonical)
        if setting is None:
            raise _unknown_key(path, key, list(FP8_SETTINGS_BY_KEY), FP8_SECTION + ".")
        if setting.name in values:
            raise CliError(f"{path}: {FP8_SECTION}.{canonical} is given twice ({key!r} is another spelling of it)")
        _store(values, setting, value, path)
    return values


def _check_section(name: str, section: Any, path: Path) -> dict[str, Any]:
    """The settings of one mapping in _SECTIONS (fsdp_config, bnb_config, dynamo_config), each key checked by its setting."""
    what, settings = _SECTIONS[name]
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise CliError(f"{path}: {name} must be a mapping of {what}, not {section!r}")
    values: dict[str, Any] = {}
    for key, value in section.items():
        setting = settings.get(key) if isinstance(key, str) else None
        if setting is None:
            raise _unknown_key(path, key, list(settings), name + ".")
        _store(values, setting, value, path)
    return values


def _store(values: dict[str, Any], setting: Setting, value: Any, path: Path) -> None:
    """Check one value; a null for a setting whose default is null means 'not set'."""
    if value is None and setting.default is None:
        return
    try:
        values[setting.name] = setting.check(value, f"{path}: {setting.yaml_path}")
    except ValueError as error:
        raise CliError(str(error)) from None


def _unknown_key(path: Path, key: object, known: list[str], prefix: str = "") -> CliError:
    guess = closest(key, known)
    hint = f"did you mean {prefix}{guess}?" if guess else f"known keys: {', '.join(known)}"
    return CliError(f"{path}: unknown key {prefix}{key}; {hint}")


# ------------------------------------------------------------------ writing
def to_yaml_data(values: Mapping[str, Any]) -> dict[str, Any]:
    """The YAML mapping for `values` (setting name -> value), in schema order, recipe under fp8_config."""
    data: dict[str, Any] = {s.yaml_key: values[s.name] for s in TOP_LEVEL_SETTINGS if values.get(s.name) is not None}
    recipe = {s.yaml_key: _plain(values[s.name]) for s in FP8_SETTINGS if s.name in values}
    if recipe:
        data[FP8_SECTION] = recipe
    for switch in (USE_FSDP, USE_DEEPSPEED):
        if values.get(switch.name) is not None:
            data[switch.yaml_key] = values[switch.name]
    sections = ((DYNAMO_SECTION, DYNAMO_SETTINGS), (FSDP_SECTION, FSDP_OPTION_SETTINGS), (BNB_SECTION, BNB_SETTINGS),
                (PARALLELISM_SECTION, PARALLELISM_SETTINGS), (DEEPSPEED_SECTION, DEEPSPEED_OPTION_SETTINGS))
    for section, settings in sections:
        mapping = {s.yaml_key: _plain(values[s.name]) for s in settings if values.get(s.name) is not None}
        if mapping:
            data[section] = mapping
    return data


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def render(values: Mapping[str, Any]) -> str:
    """config.yaml's text for `values`."""
    import yaml

    header = "# accel configuration: `accel launch` reads it; keys are documented in `accel launch --help`.\n"
    return header + yaml.safe_dump(to_yaml_data(values), sort_keys=False, default_flow_style=False)


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that the file is either the old one or the complete new one, never partial."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise

