"""`accel config` (the wizard) and `accel config default` (the defaults, without questions).

Both write through a temporary file renamed into place at the end, so that Ctrl-C, Ctrl-D or an
error leaves an existing config untouched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from accel.cli.arguments import CONFIG_FILE_HELP, add_setting_flags, given_settings
from accel.cli.config.check import check_values
from accel.cli.config.file import config_path, load_config, render, write_atomically
from accel.cli.errors import CANCELLED, CliError, say, warn
from accel.cli.launch.plan import refuse_fsdp_flags, refuse_recipe_flags
from accel.settings import (
    ACTIVATION_CHECKPOINTING,
    ACTIVATION_CHECKPOINTING_POLICY,
    ALL_SETTINGS,
    ASYNC_SAVE,
    BNB_SETTINGS,
    DYNAMO_SETTINGS,
    FP8_SETTINGS,
    FSDP_SETTINGS,
    GRADIENT_ACCUMULATION_STEPS,
    MIXED_PRECISION,
    SCHEDULER_PER_OPTIMIZER_STEP,
    TOP_LEVEL_SETTINGS,
    USE_FSDP,
)

COMMAND = "accel config"
DEFAULT_COMMAND = "accel config default"


def add_parser(subparsers: Any) -> None:
    """Register `accel config` and its `default` subcommand."""
    parser = subparsers.add_parser("config", help="answer a few questions and write config.yaml",
                                   description="Ask what matters on this machine and write config.yaml.")
    parser.add_argument("--config_file", "--config-file", metavar="PATH", help="config file to write " + CONFIG_FILE_HELP)
    parser.set_defaults(handler=run_wizard, command=COMMAND)
    actions = parser.add_subparsers(title="actions", metavar="{default}")
    default = actions.add_parser("default", help="write the defaults for this machine without asking",
                                 description="Write config.yaml with this machine's defaults, changed by any flags.")
    default.add_argument("--config_file", "--config-file", metavar="PATH", default=argparse.SUPPRESS,
                         help="config file to write " + CONFIG_FILE_HELP)
    default.add_argument("--force", action="store_true", help="overwrite an existing file")
    add_setting_flags(default, TOP_LEVEL_SETTINGS, "settings (instead of the defaults)")
    add_setting_flags(default, FP8_SETTINGS, "FP8 recipe (with --mixed_precision fp8)")
    add_setting_flags(default, FSDP_SETTINGS, "FSDP (the fsdp_* options with --use_fsdp)")
    add_setting_flags(default, BNB_SETTINGS, "bitsandbytes quantization (any of these turns it on)")
    add_setting_flags(default, DYNAMO_SETTINGS, "torch.compile (dynamo_config)")
    default.set_defaults(handler=run_default, command=DEFAULT_COMMAND)


SET_IN_SCRIPTS = (GRADIENT_ACCUMULATION_STEPS, SCHEDULER_PER_OPTIMIZER_STEP, ACTIVATION_CHECKPOINTING,
                  ACTIVATION_CHECKPOINTING_POLICY, ASYNC_SAVE)
"""Settings a script also gives in its code (Accelerator and ProjectConfiguration keywords): their defaults are not
written, since a key in the file reaches the script as ACCEL_* and a different value in the code then warns on every
process. An absent key means the same default."""


def machine_defaults(gpus: int) -> dict[str, Any]:
    """The defaults written by `accel config default`: one process per GPU, else one CPU process (the
    settings of SET_IN_SCRIPTS left out: absent, they keep the same defaults)."""
    values = {s.name: s.default for s in TOP_LEVEL_SETTINGS if s.default is not None and s not in SET_IN_SCRIPTS}
    values.update(num_processes=max(gpus, 1), use_cpu=gpus == 0)
    if gpus == 0:
        del values["gpu_ids"]
    return values


def run_default(args: argparse.Namespace) -> int:
    """Write the defaults (and any flags) to the config file; refuse to overwrite without --force."""
    from accel.cli.capabilities import gpu_count

    path, _ = config_path(args.config_file)
    if path.exists() and not args.force:
        raise CliError(f"{path} exists; pass --force to overwrite it")
    flags = given_settings(args, ALL_SETTINGS)
    refuse_recipe_flags(flags, flags.get(MIXED_PRECISION.name, MIXED_PRECISION.default))
    refuse_fsdp_flags(flags, flags.get(USE_FSDP.name, USE_FSDP.default))
    values = {**machine_defaults(gpu_count()), **flags}
    notes = check_values(values)  # a config that cannot run here is not written
    write_atomically(path, render(values))
    for note in notes:
        warn(DEFAULT_COMMAND, note)
    say(DEFAULT_COMMAND, f"wrote {path}")
    return 0


def run_wizard(args: argparse.Namespace) -> int:
    """Ask the questions, then write the answers; Ctrl-C or Ctrl-D writes nothing."""
    if not sys.stdin.isatty():
        raise CliError("the wizard needs an interactive terminal; use `accel config default` (with flags) instead")
    from accel.cli import capabilities
    from accel.cli.config import wizard

    path, chosen_by = config_path(args.config_file)
    print(f"Writing {path} ({chosen_by}).", end=" ", flush=True)  # at once: counting GPUs may load torch
    machine = wizard.Machine(gpus=capabilities.gpu_count(), cores=capabilities.cpu_cores())
    print(f"This machine: {machine.cores} CPU cores, {machine.gpus} GPU(s).")
    current = _existing_answers(path)
    if path.exists():
        print(f"{path} exists: its values are the defaults below, and it is replaced when you finish "
              "(Ctrl-C leaves it unchanged).")
    try:
        answers = wizard.ask_all(machine, current)
    except (KeyboardInterrupt, EOFError):
        state = f"{path} left unchanged" if path.exists() else f"{path} not written"
        raise CliError(f"cancelled; {state}", status=CANCELLED) from None
    check_values(answers)  # the questions offered only what runs: this is the last guard
    write_atomically(path, render(answers))
    say(COMMAND, f"wrote {path}")
    return 0


def _existing_answers(path: Path) -> dict[str, Any]:
    """The values of an existing config, offered as defaults; a broken file is named and ignored."""
    if not path.exists():
        return {}
    try:
        return load_config(path, COMMAND)
    except CliError as error:
        warn(COMMAND, f"{error}; starting from the defaults")
        return {}
