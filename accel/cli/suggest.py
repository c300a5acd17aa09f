""""Did you mean ...?" for a mistyped command, action, choice or flag, as config keys already get.

`SuggestingParser` is the parser class of `accel` and of every subcommand (argparse makes
subparsers of their parent's class): a value outside an argument's choices (`accel lanch`,
`accel config defualt`) is refused in one line naming the closest one. `unknown_flags_error`
does the same for the flags a command did not recognise (`--mixed_prcision`).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import Any

from accel._validation import closest
from accel.cli.arguments import Parser
from accel.cli.errors import CliError


class SuggestingParser(Parser):
    """A Parser that answers a value outside an argument's choices with the closest choice."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:  # argparse's own hook for choices
        choices = action.choices
        if choices is not None and value not in choices:
            known = [str(choice) for choice in choices]
            if isinstance(action, argparse._SubParsersAction):
                what = "command" if self.prog.count(" ") == 0 else "action"
            else:
                what = f"value for {'/'.join(action.option_strings) or action.dest}"
            raise CliError(f"unknown {what} {value!r}; {_hint(str(value), known)} (see `{self.prog} --help`)",
                           command=self.prog)
        super()._check_value(action, value)


def _hint(value: str, known: Sequence[str]) -> str:
    guess = closest(value, known)
    return f"did you mean {guess!r}?" if guess else f"known: {', '.join(known)}"


def unknown_flags_error(root: argparse.ArgumentParser, command: str, unknown: Sequence[str]) -> CliError:
    """The one-line error for arguments `command` (its prog, 'accel launch') did not recognise,
    with the closest known flag for each mistyped one."""
    parser = next((p for p in _parsers(root) if p.prog == command), root)
    options = [option for action in parser._actions for option in action.option_strings]
    flags = [token.split("=", 1)[0] for token in unknown if token.startswith("-")]
    guesses = {flag: guess for flag in flags if (guess := closest(flag, options)) is not None}
    named = [guess if len(guesses) == 1 else f"{guess} (for {flag})" for flag, guess in guesses.items()]
    hint = f"; did you mean {', '.join(named)}?" if named else ""
    return CliError(f"unrecognized arguments: {' '.join(unknown)}{hint} (see `{command} --help`)", command=command)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and every subcommand parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from _parsers(child)
