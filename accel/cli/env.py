"""`accel env`: what a bug report needs, in plain text.

Versions, devices, which precisions and FP8 backends can run here (and why not, including
half-precision speed on this CPU), and the active config file with its content.
"""

from __future__ import annotations

import argparse
import platform
import sys
from typing import Any

from accel.cli.arguments import CONFIG_FILE_HELP
from accel.cli.config.file import config_path

COMMAND = "accel env"


def add_parser(subparsers: Any) -> None:
    """Register `accel env`."""
    parser = subparsers.add_parser("env", help="print versions, devices and what can run here, for a bug report",
                                   description="Print versions, devices, what can run here, and the active config.")
    parser.add_argument("--config_file", "--config-file", metavar="PATH", help="config file to show " + CONFIG_FILE_HELP)
    parser.set_defaults(handler=run, command=COMMAND)


def run(args: argparse.Namespace) -> int:
    """Print the report."""
    print("\n".join([*_versions(), "", *_devices(), "", *_precisions(), "", *_config(args.config_file)]))
    return 0


def _versions() -> list[str]:
    import torch

    from accel._version import __version__

    return [
        f"accel: {__version__}",
        f"torch: {torch.__version__} (CUDA {torch.version.cuda or 'none'})",
        f"Python: {platform.python_version()} ({platform.python_implementation()}, {sys.executable})",
        f"OS: {platform.platform()}",
    ]


def _devices() -> list[str]:
    from accel.cli import capabilities

    gpus = capabilities.gpu_descriptions()
    return [
        f"CPU: {capabilities.cpu_model()}, {capabilities.cpu_cores()} cores available",
        "GPUs: " + ("none (torch sees no CUDA device)" if not gpus else f"{len(gpus)}"),
        *(f"  {line}" for line in gpus),
    ]


def _precisions() -> list[str]:
    from accel.cli import capabilities

    device = capabilities.training_device()
    lines = [f"Precisions on {device}:"]
    for name, reason in capabilities.precision_status(device).items():
        slow = capabilities.speed_note(name, device) if reason is None else None
        verdict = "runs" if reason is None else f"cannot run: {reason}"
        lines.append(f"  {name:<10} {verdict}" + (f" (slow: {slow})" if slow else ""))
    lines.append("FP8 backends:")
    for name, reason in capabilities.fp8_backend_status().items():
        lines.append(f"  {name:<10} " + ("can run here" if reason is None else f"cannot run: {reason}"))
        note = capabilities.fp8_backend_note(name)
        if note:
            lines.append(f"  {'':<10} note: {note}.")
    from accel.quantization.capability import capability_line

    lines.append(capability_line(device))
    return lines


def _config(flag: str | None) -> list[str]:
    """The active config file, its content, and whether it loads."""
    from accel.cli.config.file import load_config
    from accel.cli.errors import CliError

    path, chosen_by = config_path(flag)
    if not path.exists():
        consequence = "defaults apply" if chosen_by == "the default location" else "accel launch would refuse it"
        return [f"Config file: {path} ({chosen_by}): not found, {consequence}"]
    try:
        text = path.read_text(encoding="utf-8")
        load_config(path, COMMAND)
    except OSError as error:
        return [f"Config file: {path} ({chosen_by}): cannot read: {error.strerror}"]
    except CliError as error:
        text = text.rstrip() + f"\n# accel cannot use this file: {error}"
    return [f"Config file: {path} ({chosen_by}):", *(f"  {line}" for line in text.rstrip().splitlines())]
