"""`accel test`: launch a short built-in training run with the active config (or flags) and check it.

The run goes through `accel launch`'s own code path, so it tests the configuration as a real
launch would use it. The script (selftest_script.py) prints one line per check and a verdict,
and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from accel.cli.arguments import given_settings
from accel.cli.launch import command as launch
from accel.settings import ALL_SETTINGS

COMMAND = "accel test"
SCRIPT = Path(__file__).with_name("selftest_script.py")


def add_parser(subparsers: Any) -> None:
    """Register `accel test`, with the same flags as `accel launch`."""
    parser = subparsers.add_parser(
        "test", help="run a short built-in training check with the active config",
        description="Launch a short built-in training run with the active config (or flags) and check that it "
        "trains, that the loss decreases and that the precision asked is the one that runs.",
    )
    launch.add_launch_flags(parser)
    parser.set_defaults(handler=run, command=COMMAND)


def run(args: argparse.Namespace) -> int:
    """Launch the check; its exit status (1 when a check failed)."""
    flags = given_settings(args, ALL_SETTINGS)
    return launch.launch(flags, args.config_file, [str(SCRIPT)], module=False, report_failure=False)
