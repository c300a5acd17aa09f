"""`python -m accel.cli.distributed_run <torchrun arguments>`: torch.distributed.run with a one-line failure.

torchrun answers a failing worker with its own traceback and exit status 1. This wrapper runs
the same launcher (same arguments, same rendezvous) but reports the first failing rank in one
line and exits with that worker's status, so `accel launch` passes the script's status on.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from accel.cli.processes import exit_status, failure_line


def main(argv: Sequence[str] | None = None) -> int:
    """Run torch.distributed.run with `argv`; the first failing worker's exit status, else 0."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # The agent logs each failure at ERROR level; the line printed below replaces that.
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    label = args.training_script if args.module else Path(args.training_script).name
    try:
        run(args)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        print(failure_line(label, failure.exitcode, f" (rank {rank} of {_world_size(args)})"), file=sys.stderr, flush=True)
        return exit_status(failure.exitcode)
    except SignalException as error:
        print(f"accel launch: stopped by {error.sigval.name}; the workers were stopped", file=sys.stderr, flush=True)
        return exit_status(-int(error.sigval))
    except Exception as error:  # the launcher itself failed (rendezvous, port in use): one line, not its traceback
        print(f"accel launch: {_start_failure(error, args, label)}", file=sys.stderr, flush=True)
        return 1
    return 0


def _start_failure(error: Exception, args: object, label: str) -> str:
    """One line saying why torchrun could not start the workers, naming the flag to change."""
    text = str(error)
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        port = getattr(args, "master_port", "?")
        return (
            f"port {port} is already in use on this machine: pass another --main_process_port "
            "(or leave it out on one machine, and accel picks a free one)"
        )
    if "timed out" in text.lower():
        address = f"{getattr(args, 'master_addr', '?')}:{getattr(args, 'master_port', '?')}"
        return (
            f"could not reach machine 0 at {address} in time: check --main_process_ip and --main_process_port, "
            "that machine 0 has started, and that no firewall blocks the port"
        )
    reason = text.strip().splitlines()[0] if text.strip() else ""
    return f"torch.distributed.run could not start {label}: {type(error).__name__}: {reason}"


def _world_size(args: object) -> str:
    """nnodes x nproc_per_node as text; torchrun keeps nnodes as '2' or as a range such as '1:1'."""
    try:
        nodes = str(getattr(args, "nnodes")).split(":")[-1]
        return str(int(nodes) * int(getattr(args, "nproc_per_node")))
    except (TypeError, ValueError):
        return "?"

if __name__ == "__main__":
    raise SystemExit(main())
