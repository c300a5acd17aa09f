"""argparse with one-line errors, and the `accel launch` flags derived from the settings schema."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from accel.cli.errors import CliError
from accel.cli.help_text import describe
from accel.settings import BoolKind, Setting

CONFIG_FILE_HELP = "(default: $ACCEL_CONFIG_FILE, else ${XDG_CONFIG_HOME:-~/.config}/accel/config.yaml)"
"""Where the config file is when --config_file is not given; each command's help says what it does with it."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (raised as CliError), not usage plus message.

    On a parser whose `script_args_dest` is set (`accel launch`), the first positional argument
    is a script and everything after it is the script's: those arguments are set aside before
    argparse reads the rest, so that none is taken for a flag (`--num` as an abbreviation of
    `--num_processes`, `-m`, `--cpu`) or refused as ambiguous.
    """

    script_args_dest: str | None = None

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see `{self.prog} --help`)", command=self.prog)

    def parse_known_args(  # type: ignore[override]  # one signature for argparse's overloads, as it is called
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.script_args_dest is None or args is None:
            return super().parse_known_args(args, namespace)
        args = list(args)
        end = self._script_end(args)
        parsed, unknown = super().parse_known_args(args[:end], namespace)
        setattr(parsed, self.script_args_dest, args[end:])
        return parsed, unknown

    def _script_end(self, args: list[str]) -> int:
        """The index just past the script's name in `args` (len(args) when there is none)."""
        index = 0
        while index < len(args):
            token = args[index]
            if token == "--":
                return min(index + 2, len(args))
            if not token.startswith("-") or token == "-":
                return index + 1
            action = self._flag_action(token.split("=", 1)[0])
            takes_value = action is not None and action.nargs != 0 and "=" not in token
            index += 2 if takes_value else 1
        return len(args)

    def _flag_action(self, flag: str) -> argparse.Action | None:
        """The action of `flag`, or of the one flag it abbreviates; None when unknown (argparse then says so)."""
        if flag in self._option_string_actions:
            return self._option_string_actions[flag]
        if not flag.startswith("--"):
            return None
        matches = {a for option, a in self._option_string_actions.items() if option.startswith(flag)}
        if len(matches) > 1:
            options = ", ".join(o for o, a in self._option_string_actions.items() if a in matches and o.startswith(flag))
            self.error(f"ambiguous option: {flag} could match {options}")
        return matches.pop() if matches else None


class _SettingFlag(argparse.Action):
    """Store a setting's flag as its canonical value; the same setting given twice, differently, is an error."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, setting: Setting, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.setting = setting

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        try:
            value = self.setting.parse(values, option_string or self.option_strings[0])
        except ValueError as error:
            raise CliError(str(error), command=parser.prog) from None
        _store_once(parser, namespace, self.dest, value, option_string)


class _SettingSwitch(argparse.Action):
    """A boolean setting: `--flag` is true, `--no-flag` false (argparse's BooleanOptionalAction idea)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        negated = [f"--no-{s[2:]}" for s in option_strings]
        kwargs.pop("setting")
        super().__init__([*option_strings, *negated], dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _store_once(parser, namespace, self.dest, not (option_string or "").startswith("--no-"), option_string)


def _store_once(
    parser: argparse.ArgumentParser, namespace: argparse.Namespace, dest: str, value: Any, option_string: str | None
) -> None:
    """Set `dest`, refusing a second, different value for it (`--cpu --no-cpu`, `--num_processes 2 --num-processes 3`)."""
    given = getattr(namespace, "_given_as", {})
    previous = getattr(namespace, dest, None)
    if dest in given and previous != value:
        raise CliError(
            f"conflicting flags: {given[dest]} {previous!r} and {option_string} {value!r}; give one", command=parser.prog
        )
    setattr(namespace, dest, value)
    namespace._given_as = {**given, dest: option_string}


def add_setting_flags(parser: argparse.ArgumentParser, settings: Iterable[Setting], title: str) -> None:
    """Add one flag per setting (dest = the setting's name); an absent flag leaves no attribute."""
    group = parser.add_argument_group(title)
    for setting in settings:
        options: dict[str, Any] = {
            "dest": setting.name,
            "setting": setting,
            "default": argparse.SUPPRESS,
            "help": f"{describe(setting)} [{setting.env_var}; config key {setting.yaml_path}]",
        }
        if isinstance(setting.kind, BoolKind):
            group.add_argument(*setting.flags, action=_SettingSwitch, **options)
        else:
            group.add_argument(*setting.flags, action=_SettingFlag, metavar=_metavar(setting), **options)


def _metavar(setting: Setting) -> str:
    choices = setting.kind.choices
    return "{" + ",".join(choices) + "}" if choices else setting.name.upper().removeprefix("FP8_")


def given_settings(namespace: argparse.Namespace, settings: Iterable[Setting]) -> dict[str, Any]:
    """The settings given on the command line: name -> canonical value."""
    return {s.name: getattr(namespace, s.name) for s in settings if hasattr(namespace, s.name)}

