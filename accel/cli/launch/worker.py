"""`python -m accel.cli.launch.worker script|module TARGET [args]`: how `accel launch` starts each of several processes.

torch.distributed.run starts this module in place of the script. Before running the script, as
`python script.py args` (or `python -m module args`) would, it does two things the script cannot
do for itself early enough:

* it asks to be killed when the torchrun wrapper dies (parent_death.py), so that a launcher
  killed with SIGKILL leaves no worker behind;
* under a stall watch (stall_report_after, see stall_watch.py), it maps the file in which accel's
  collectives mark the one this process waits in, and has faulthandler dump every thread's stack
  on the launcher's request (accel/distributed/stall_marks.py);
* it installs an excepthook so that when several processes fail the same way, only the first
  prints its traceback, and the wrapper prints one line for each of the others
  (first_failure.py). The traceback starts at the script's own frames, as `python script.py`'s;
* a script that ends with `sys.exit(N)`, N not 0, is recorded as failing on its own before the
  process ends and its connections close (a SystemExit never reaches the excepthook): otherwise
  a peer that lost its connection to it would report first, and be blamed (cause.py).

Stdlib-only, and it imports nothing of torch: the script may set variables (CUDA_VISIBLE_DEVICES)
before it imports torch itself.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from accel.cli.launch.first_failure import FirstFailure
from accel.cli.launch.parent_death import die_with_parent

AGENT_PID_VARIABLE = "_ACCEL_LAUNCH_AGENT_PID"
"""The wrapper's pid, set by distributed_run for its workers (a leading _: not a setting)."""
FAILURES_VARIABLE = "_ACCEL_LAUNCH_FAILURES"
"""The folder where failing workers meet (see first_failure.py)."""
STALLS_VARIABLE = "_ACCEL_LAUNCH_STALLS"
"""The folder of the workers' stall marks and stacks, when the launcher watches for stalls (see stall_watch.py)."""


def main(argv: Sequence[str]) -> None:
    """Arrange the worker's death with the wrapper and its excepthook, then run the script as __main__."""
    if len(argv) < 2 or argv[0] not in ("script", "module"):
        raise SystemExit("usage: python -m accel.cli.launch.worker script|module TARGET [args]  (accel launch runs this)")
    mode, target, args = argv[0], argv[1], list(argv[2:])
    agent = os.environ.pop(AGENT_PID_VARIABLE, None)
    if agent is not None and agent.isdigit():
        die_with_parent(signal.SIGKILL, int(agent))
    stalls = os.environ.pop(STALLS_VARIABLE, None)
    if stalls:
        from accel.distributed.stall_marks import open_marks

        try:
            open_marks(Path(stalls), os.environ.get("RANK", "?"))
        except OSError as error:  # the launcher's temporary folder unwritable: run on, without stall reports
            print(f"accel launch: no stall report for this process ({error})", file=sys.stderr, flush=True)
    folder = os.environ.pop(FAILURES_VARIABLE, None)
    hook: FirstFailure | None = None
    if folder:
        hidden = (__file__, runpy.__file__)  # the bootstrap's frames, above the script's
        hook = sys.excepthook = FirstFailure(Path(folder), os.environ.get("RANK", "?"), sys.excepthook, hidden)
    try:
        _run(mode, target, args)
    except SystemExit as stop:
        if hook is not None:
            hook.exited(stop.code)
        raise


def _run(mode: str, target: str, args: list[str]) -> None:
    """Run the script (or module) `target` with `args` as __main__, as `python script.py args` would."""
    if mode == "module":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    path = os.path.abspath(target)  # as `python script.py` since 3.9: __file__ and tracebacks are absolute
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
