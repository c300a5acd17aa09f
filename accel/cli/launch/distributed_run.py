"""`python -m accel.cli.launch.distributed_run <torchrun arguments> -- script|module TARGET [args]`: torchrun, made strict.

torch.distributed.run answers a failing worker with its own traceback and exit status 1, waits
forever for a worker that outlives the others, and parses the script's arguments with its own
parser (a script's `--start` is refused as an abbreviation of torchrun's `--start-method`). This
wrapper runs the same launcher (same arguments, same rendezvous), but:

* the script's arguments never reach torchrun's parser: `accel launch` puts them after `--`;
* each worker is `python -m accel.cli.launch.worker ...`, which dies with this wrapper and prints a
  traceback only for the first failure (see worker.py);
* once a worker has exited, the others get rank_exit_grace seconds (rank_grace.py);
* a rank missing from a collective the others have waited in for stall_report_after seconds is
  named with its stack, and training goes on (stall_watch.py); when a collective times out, the
  stacks of the ranks that never joined it come with the failure;
* a failure is reported in one line naming the rank that caused it, with that worker's exit status
  (the first to fail on its own, not a peer that failed because it left: cause.py), after one line
  for each process that followed it.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from accel.cli.errors import CliError
from accel.cli.launch.cause import Cause, find_cause, follower_lines
from accel.cli.launch.children import CHECK_VARIABLE, SEPARATOR, exit_status, failure_line
from accel.cli.launch.first_failure import elsewhere_line, first_record, never_joined_line
from accel.cli.launch.lost_machine import lost_machine_line, machine_0_missing, rendezvous_timeout_line
from accel.cli.launch.rank_grace import DEFAULT_GRACE_S, RanksDidNotFinish, rank_exit_grace
from accel.cli.launch.rendezvous import CPP_LOG_VARIABLE
from accel.cli.launch.stall_watch import DEFAULT_AFTER_S, StallWatch
from accel.cli.launch.worker import AGENT_PID_VARIABLE, FAILURES_VARIABLE, STALLS_VARIABLE
from accel.settings import RANK_EXIT_GRACE, STALL_REPORT_AFTER

COMMAND = "accel launch"


def main(argv: Sequence[str] | None = None) -> int:
    """Run torch.distributed.run with `argv`; the first failing worker's exit status, else 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if SEPARATOR not in argv or len(argv) < argv.index(SEPARATOR) + 3:
        print(f"usage: python -m accel.cli.launch.distributed_run <torchrun arguments> {SEPARATOR} script|module TARGET "
              "[args]  (accel launch runs this)", file=sys.stderr)
        return 2
    split = argv.index(SEPARATOR)
    worker = argv[split + 1:]
    label = worker[1] if worker[0] == "module" else Path(worker[1]).name
    try:
        grace = RANK_EXIT_GRACE.from_env() or DEFAULT_GRACE_S
        stall_after = STALL_REPORT_AFTER.from_env()
    except ValueError as error:  # the user's own variable (a flag or the config file was checked before)
        print(f"accel launch: {error}", file=sys.stderr)
        return 2
    _quiet_cpp_logs()
    check = os.environ.pop(CHECK_VARIABLE, None)
    if check:
        from accel.cli.config.check import check_here

        device, _, gpu_ids = check.partition(" ")
        try:
            os.environ.update(check_here(device, gpu_ids, COMMAND))
        except CliError as error:
            print(f"{COMMAND}: {error}", file=sys.stderr, flush=True)
            return error.status
    failures = Path(tempfile.mkdtemp(prefix="accel-launch-"))
    os.environ.update({FAILURES_VARIABLE: str(failures), AGENT_PID_VARIABLE: str(os.getpid())})
    stalls = Path(tempfile.mkdtemp(prefix="accel-stalls-"))
    after = DEFAULT_AFTER_S if stall_after is None else stall_after
    watch = StallWatch(stalls, after, label, "?") if after > 0 and hasattr(os, "mkfifo") else None  # not on Windows
    if watch is not None:
        os.environ[STALLS_VARIABLE] = str(stalls)
    try:
        return _run(argv[:split], worker, label, grace, failures, watch)
    finally:
        if watch is not None:
            watch.stop()
        shutil.rmtree(failures, ignore_errors=True)
        shutil.rmtree(stalls, ignore_errors=True)


def _quiet_cpp_logs() -> None:
    """Import torch with its C++ log level at FATAL (unless the user set one), then restore the environment.

    A machine waiting for another logs each refused connection with a C++ stack dump; the launcher
    says what happened in one line instead. The level is read when torch loads, so the workers,
    started later with the restored environment, log as torch does by default.
    """
    own = os.environ.get(CPP_LOG_VARIABLE)
    if own is None:
        os.environ[CPP_LOG_VARIABLE] = "FATAL"
    import torch  # noqa: F401 - loaded here, at this log level

    if own is None:
        del os.environ[CPP_LOG_VARIABLE]


def _run(
    torchrun_args: list[str], worker: list[str], label: str, grace: float, failures: Path, watch: StallWatch | None
) -> int:
    """torchrun's launcher with `worker` as each process's arguments; failures in one line."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # The agent logs each failure and each stop at WARNING or ERROR level; the line printed below replaces that.
    for name in ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.agent.server.api"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    args = parse_args([*torchrun_args, "--module", "accel.cli.launch.worker"])
    args.training_script_args = worker
    missing = machine_0_missing(args)
    if missing:
        print(f"{COMMAND}: {missing}", file=sys.stderr, flush=True)
        return 1
    seen: dict[str, Any] = {}
    last_stacks: list[str] = []
    if watch is not None:
        watch.world = _world_size(args)
        watch.start()

    def before_stop(running: list[int]) -> None:
        if watch is not None and first_record(failures).get("reason") == "timeout":
            last_stacks[:] = watch.stacks_of(running)

    try:
        # `seen` is read when a restart happens, after `with ... as seen` has bound it to the agent's record
        restarting = lambda found, number, most: _restarting(  # noqa: E731
            found, number, most, failures, seen.get("running", []))
        with rank_exit_grace(grace, restarting, before_stop) as seen:
            run(args)
    except ChildFailedError as error:
        return _report_failure(error, args, label, failures, seen.get("running", []), last_stacks)
    except RanksDidNotFinish as error:
        _print(*follower_lines(failures, None), _did_not_finish(error, label, _world_size(args)))
        return 1
    except SignalException as error:
        _print(*follower_lines(failures, None), f"accel launch: stopped by {error.sigval.name}; the workers were stopped")
        return exit_status(-int(error.sigval))
    except Exception as error:  # the launcher itself failed (rendezvous, port in use): one line, not its traceback
        _print(*follower_lines(failures, None), f"accel launch: {_start_failure(error, args, label)}")
        return 1
    _print(*follower_lines(failures, None))
    return 0


def _print(*lines: str | None) -> None:
    """Each line that is not None to stderr, at once (the workers' output shares the terminal)."""
    for line in lines:
        if line is not None:
            print(line, file=sys.stderr, flush=True)


def _report_failure(
    error: Any, args: argparse.Namespace, label: str, failures: Path, stopped: list[int], last_stacks: list[str]
) -> int:
    """Print the lines about the processes that followed the cause, then the cause's line; its exit status
    as a shell's. `stopped`: the ranks torchrun stopped, still running, once a worker had failed."""
    cause = _cause(error, failures, stopped)
    world = _world_size(args)
    _print(*follower_lines(failures, cause, stopped), *last_stacks)
    _print(never_joined_line(cause.record, stopped, world), elsewhere_line(failures, cause.record))
    _print(failure_line(label, cause.status, f" (rank {cause.rank} of {world})"))
    _print(lost_machine_line(args, error, cause.record, stopped, label))  # last: the cause, when it was another machine
    return exit_status(cause.status)


def _cause(error: Any, failures: Path, stopped: Sequence[int]) -> Cause:
    """The failure that caused the others (cause.find_cause over torchrun's failures); torchrun's own first
    failure when no process failed in a way find_cause can tell (its records gone)."""
    exits = {rank: failure.exitcode for rank, failure in getattr(error, "failures", {}).items()}
    cause = find_cause(failures, exits, stopped)
    if cause is not None:
        return cause
    rank, failure = error.get_first_failure()
    return Cause(rank, failure.exitcode)


def _restarting(found: dict[int, Any], number: int, most: int, failures: Path, stopped: Sequence[int]) -> None:
    """Before restart `number` of `most`: the lines about the attempt that failed, then one saying it restarts.

    The failures folder is emptied, so that the next attempt's first failure is its own.
    """
    cause = find_cause(failures, {rank: failure.exitcode for rank, failure in found.items()}, stopped)
    _print(*follower_lines(failures, cause, stopped))
    what = f"rank {cause.rank if cause is not None else ', '.join(map(str, sorted(found)))} failed"
    _print(f"{COMMAND}: {what}; restarting every process of this machine (restart {number} of {most}); a script "
           "that loads its last checkpoint at start goes on from there")
    for path in failures.iterdir():
        path.unlink(missing_ok=True)


def _did_not_finish(error: RanksDidNotFinish, label: str, world: str) -> str:
    """One line naming the ranks that were stopped and the ones that had exited."""
    stuck = ", ".join(str(rank) for rank in error.stuck)
    exited = ", ".join(f"rank {rank} (status {code})" for rank, code in sorted(error.exited.items()))
    plural = "s" if len(error.stuck) > 1 else ""
    return (
        f"accel launch: {label}: rank{plural} {stuck} of {world} did not finish within {error.grace:g} s after "
        f"{exited} exited, so accel stopped {'them' if plural else 'it'}. A process that outlives the others "
        "usually waits for something they never do (a collective that only some processes call) or hangs on its "
        "own; --rank_exit_grace SECONDS sets the wait."
    )


def _start_failure(error: Exception, args: object, label: str) -> str:
    """One line saying why torchrun could not start the workers, naming the flag to change."""
    text = str(error)
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        port = getattr(args, "master_port", "?")
        return (
            f"port {port} is already in use on this machine: pass another --main_process_port "
            "(or leave it out on one machine, and accel picks a free one)"
        )
    joined = rendezvous_timeout_line(args, error)
    if joined:
        return joined
    reason = text.strip().splitlines()[0] if text.strip() else ""
    return f"torch.distributed.run could not start {label}: {type(error).__name__}: {reason}"


def _world_size(args: argparse.Namespace) -> str:
    """nnodes x nproc_per_node as text; torchrun keeps nnodes as '2' or as a range such as '1:1'."""
    try:
        nodes = str(args.nnodes).split(":")[-1]
        return str(int(nodes) * int(args.nproc_per_node))
    except (TypeError, ValueError):
        return "?"

_STATUS: list[int] = []
"""main()'s exit status, once it has returned."""


def _leave_without_teardown() -> None:
    """After a normal return, the last exit handler: flush and leave, skipping the interpreter's teardown.

    Tearing down the modules torch loaded takes about 0.6 s of CPU (a 2-core Xeon), which every launch
    would wait for after its workers have ended; this process holds nothing that needs it: its workers
    are gone, and every other exit handler (torch's, logging's, weakref finalizers) has run before this
    one, registered first. After an uncaught exception or a signal, the interpreter ends as usual.
    """
    if _STATUS:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_STATUS[0])


def run_as_main(entry: Callable[[], int] = main) -> NoReturn:
    """Run `entry` (main) as this process's whole life: its status is the exit status, and the
    interpreter's teardown is skipped (_leave_without_teardown)."""
    atexit.register(_leave_without_teardown)  # registered first, so it runs last
    _STATUS.append(entry())
    raise SystemExit(_STATUS[0])


if __name__ == "__main__":
    run_as_main()
