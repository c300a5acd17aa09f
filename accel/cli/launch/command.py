"""`accel launch [flags] script.py [args]`: run a training script with the configured settings.

Flags override the config file, which overrides the defaults. One process: the script runs as
a child with the ACCEL_* variables set. Several processes or machines: torch.distributed.run.
The script's exit status is accel's.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accel._validation import closest
from accel.cli import capabilities
from accel.cli.arguments import CONFIG_FILE_HELP, add_setting_flags, given_settings
from accel.cli.config.check import check_launch, needs_check
from accel.cli.config.file import active_config
from accel.cli.errors import CliError
from accel.cli.launch.children import CHECK_VARIABLE, exit_status, failure_line, run_child, script_command, torchrun_command
from accel.cli.launch.plan import plan_launch
from accel.settings import (
    ALL_SETTINGS,
    BNB_SETTINGS,
    DEEPSPEED_SETTINGS,
    DYNAMO_SETTINGS,
    FP8_SETTINGS,
    FSDP_SETTINGS,
    GPU_IDS,
    PARALLELISM_SETTINGS,
    TOP_LEVEL_SETTINGS,
)
from accel.settings.environment import check_setting_values

COMMAND = "accel launch"


def add_parser(subparsers: Any) -> None:
    """Register `accel launch`."""
    parser = subparsers.add_parser(
        "launch", help="run a training script with the configured precision and processes",
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_launch_flags(parser)
    parser.add_argument("-m", "--module", action="store_true", help="run SCRIPT as a module, like python -m")
    parser.add_argument("--dry_run", "--dry-run", metavar="MODEL", help="run nothing: shard MODEL (a preset, a "
                        "transformers folder or cached name, or module:function) as this job would, on a fake process "
                        "group of its size, and print the plan and each rank's memory; a layout that cannot shard is "
                        "refused naming the dimension (docs/memory.md)")
    parser.add_argument("script", metavar="script.py", nargs="?", help="the training script (or module, with -m)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed on to the script, "
                        "all of them: none is read by accel launch")
    parser.script_args_dest = "script_args"  # see arguments.Parser: what follows the script is the script's
    parser.set_defaults(handler=run, command=COMMAND)


def add_launch_flags(parser: argparse.ArgumentParser) -> None:
    """--config_file and one flag per setting (shared by `accel launch` and `accel test`)."""
    parser.add_argument("--config_file", "--config-file", metavar="PATH", help="config file to read " + CONFIG_FILE_HELP)
    add_setting_flags(parser, TOP_LEVEL_SETTINGS, "settings (override the config file)")
    add_setting_flags(parser, FP8_SETTINGS, "FP8 recipe (mixed_precision fp8; override fp8_config)")
    add_setting_flags(parser, DYNAMO_SETTINGS, "torch.compile (override dynamo_config)")
    add_setting_flags(parser, FSDP_SETTINGS, "FSDP: fully sharded data parallel (override use_fsdp and fsdp_config)")
    add_setting_flags(parser, BNB_SETTINGS, "bitsandbytes quantization: any of these turns it on (override bnb_config)")
    add_setting_flags(parser, PARALLELISM_SETTINGS, "device mesh: ParallelismConfig sizes (override parallelism_config)")
    add_setting_flags(parser, DEEPSPEED_SETTINGS, "DeepSpeed ZeRO (override use_deepspeed and deepspeed_config)")


def run(args: argparse.Namespace) -> int:
    """The `accel launch` command."""
    if args.dry_run is not None:
        from accel.cli.launch.dry_run import dry_run

        return dry_run(given_settings(args, ALL_SETTINGS), args.config_file, args.dry_run, args.script)
    if args.script is None:
        raise CliError("no script given: accel launch [flags] script.py [script arguments]")
    target = [args.script, *args.script_args]
    return launch(given_settings(args, ALL_SETTINGS), args.config_file, target, module=args.module)


def launch(
    flags: Mapping[str, Any], config_flag: str | None, target: Sequence[str], *, module: bool,
    report_failure: bool = True,
) -> int:
    """Plan and start the processes for `target` ([script, *args]); the script's exit status."""
    try:
        check_setting_values()
    except ValueError as error:
        raise CliError(str(error)) from None
    if not module:
        _check_script(target[0])
    config = active_config(config_flag, COMMAND)
    plan = plan_launch(flags, config, COMMAND, capabilities.gpu_count, capabilities.cpu_cores())
    checked = needs_check({**os.environ, **plan.env})  # nothing to check for precision 'no' without FSDP or bnb
    if plan.distributed:  # SIGTERM: the wrapper then stops its workers, which also die with it
        # The wrapper imports torch anyway: it checks the configuration before any worker starts (check_here).
        check = {CHECK_VARIABLE: f"{'cpu' if plan.use_cpu else 'gpu'} {plan.get(GPU_IDS.name)}"} if checked else {}
        env = {**plan.env, **check}
        returncode = run_child(torchrun_command(plan, target, module), env, signal.SIGTERM)
        if returncode < 0:  # the wrapper reports every other end itself
            print(failure_line(f"torch.distributed.run (running {target[0]})", returncode), file=sys.stderr, flush=True)
        return exit_status(returncode)
    env = {**plan.env, **(check_launch(plan, COMMAND) if checked else {})}  # refuses what cannot run; says notes once
    returncode = run_child(script_command(target, module), env)
    if returncode != 0 and report_failure:
        label = target[0] if module else Path(target[0]).name
        print(failure_line(label, returncode), file=sys.stderr, flush=True)
    return exit_status(returncode)


def _check_script(script: str) -> None:
    """Refuse a script path that is not a file, naming the closest file of its folder (`trian.py`: train.py)."""
    path = Path(script)
    if not path.is_file():
        what = "is a directory, not a script" if path.is_dir() else "does not exist"
        folder = path.parent if path.parent.is_dir() else None
        guess = closest(path.name, [p.name for p in folder.iterdir() if p.is_file()]) if folder and not path.is_dir() else None
        hint = f"; did you mean {path.with_name(guess)}?" if guess else ""
        raise CliError(f"script {script} {what}{hint}")
