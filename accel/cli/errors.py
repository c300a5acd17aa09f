"""How the command line reports a problem: one line on stderr, never a traceback."""

from __future__ import annotations

import sys

USAGE_ERROR = 2
"""Exit status for bad input (argparse's convention)."""
CANCELLED = 130
"""Exit status when the user stops a command with Ctrl-C (128 + SIGINT)."""


class CliError(Exception):
    """Bad input or a refused request: `main` prints `<command>: <message>` and exits with `status`.

    `command` ('accel launch') is filled in by whoever knows it: the parser, or `main`.
    """

    def __init__(self, message: str, status: int = USAGE_ERROR, command: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.command = command


def warn(command: str, message: str) -> None:
    """Print one warning line to stderr, naming the command it comes from."""
    print(f"{command}: warning: {message}", file=sys.stderr, flush=True)


def say(command: str, message: str) -> None:
    """Print one line of status to stderr (stdout belongs to the user's script)."""
    print(f"{command}: {message}", file=sys.stderr, flush=True)
