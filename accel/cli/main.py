"""`accel` and `python -m accel`: the entry point of the command line.

Subcommands are registered from their modules, which import torch, questionary and yaml only
when they run, so that `accel --help` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from accel._version import __version__
from accel.cli import bench, env, estimate, selftest
from accel.cli.config import command as config_command
from accel.cli.errors import CANCELLED, CliError
from accel.cli.launch import command as launch
from accel.cli.suggest import SuggestingParser, unknown_flags_error

DESCRIPTION = (
    "accel runs an ordinary PyTorch training script in the precision you ask for "
    "(fp32, fp16, bf16, true 16-bit, fp64 or FP8)."
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser, with one subparser per command (each a SuggestingParser: typos get "did you mean")."""
    parser = SuggestingParser(prog="accel", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"accel {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="{config,launch,env,test,bench,estimate-memory}")
    for command in (config_command, launch, env, selftest, bench, estimate):
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Bad input is one line on stderr, never a traceback."""
    parser = build_parser()
    command = "accel"
    try:
        args, unknown = parser.parse_known_args(argv)
        command = getattr(args, "command", command)
        if unknown:
            raise unknown_flags_error(parser, command, unknown)
        if not hasattr(args, "handler"):
            parser.print_help()
            return 0
        return int(args.handler(args))
    except CliError as error:
        print(f"{error.command or command}: {error}", file=sys.stderr, flush=True)
        return error.status
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr, flush=True)
        return CANCELLED
