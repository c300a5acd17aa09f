"""`accel` and `python -m accel`: the entry point of the command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from accel._version import __version__

DESCRIPTION = (
    "accel runs an ordinary PyTorch training script in the precision you ask for "
    "(fp32, fp16, bf16, true 16-bit, fp64 or FP8)."
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser."""
    parser = argparse.ArgumentParser(prog="accel", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"accel {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0
