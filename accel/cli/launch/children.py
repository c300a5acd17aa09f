"""Start the script's processes and hand back its exit status, with one line when it fails.

One process: `python script args` as a child. Several: `python -m accel.cli.launch.distributed_run`
with torch.distributed.run's own arguments, then `--` and the script with its arguments; that
wrapper runs torchrun and reports a failing rank in one line instead of torchrun's traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import FrameType

from accel.cli.launch.parent_death import child_setup
from accel.cli.launch.plan import LaunchPlan
from accel.cli.launch.rendezvous import rendezvous_arguments

_FORWARDED = (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "SIGHUP") else (signal.SIGTERM,)


_SIGNAL_CAUSES = {
    "SIGKILL": "nothing in the process could report why; most often the kernel's out-of-memory killer "
               "(`dmesg` says so) or a job scheduler's limit",
    "SIGSEGV": "a crash in native code (a C/C++ extension, a driver)",
    "SIGBUS": "a bad memory access in native code; with DataLoader workers, often a /dev/shm too small",
    "SIGABRT": "aborted by native code (a failed C++ check: its message is above)",
}
"""Signals accel never sends, and what usually sends them: said with the failure, since the process could not."""


def failure_line(label: str, status: int, where: str = "") -> str:
    """'accel launch: train.py exited with status 3' (or 'was stopped by SIGKILL: <likely cause>'), plus where."""
    if status >= 0:
        return f"accel launch: {label} exited with status {status}{where}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        return f"accel launch: {label} was stopped by signal {-status}{where}"
    cause = f": {_SIGNAL_CAUSES[name]}" if name in _SIGNAL_CAUSES else ""
    return f"accel launch: {label} was stopped by {name}{where}{cause}"


def exit_status(returncode: int) -> int:
    """A child's return code as a shell exit status (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def script_command(target: Sequence[str], module: bool) -> list[str]:
    """The interpreter command that runs the user's script (or module) with its arguments."""
    return [sys.executable, *(["-m"] if module else []), *target]


CHECK_VARIABLE = "_ACCEL_LAUNCH_CHECK"
"""'cpu all' or 'gpu 0,1': asks the torchrun wrapper to check the configuration before it starts the workers."""
SEPARATOR = "--"
"""Between torchrun's arguments and the worker's in the wrapper's command (see distributed_run.py)."""

def torchrun_command(plan: LaunchPlan, target: Sequence[str], module: bool) -> list[str]:
    """`python -m accel.cli.launch.distributed_run <torch.distributed.run arguments> -- script|module TARGET args`.

    The script's arguments come after the separator, so torchrun's parser never sees them.
    """
    layout = ["--nproc_per_node", str(plan.processes_per_machine)]
    worker = ["module" if module else "script", *target]
    return [sys.executable, "-m", "accel.cli.launch.distributed_run", *rendezvous_arguments(plan), *layout, SEPARATOR,
            *worker]


def run_child(command: Sequence[str], env: Mapping[str, str], death_signal: int = signal.SIGKILL) -> int:
    """Run `command` with `env` added to this environment; its return code (negative: killed by that signal).

    Ctrl-C reaches the child from the terminal, so this process only waits for it; SIGTERM and
    SIGHUP sent to this process are passed on. If this process dies, even by SIGKILL, the child
    gets `death_signal` (on Linux; see parent_death.py).
    """
    setup = child_setup(death_signal)  # one system call in the child; `accel launch` runs no Python thread
    child = subprocess.Popen(list(command), env={**os.environ, **env}, preexec_fn=setup)  # noqa: PLW1509

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in _FORWARDED}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        return child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
