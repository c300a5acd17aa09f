"""Name the machine at fault when several machines run: one that never joined, or one lost mid-run.

Each machine's launcher sees only its own processes. When another machine never comes, the
rendezvous times out; when another machine dies mid-run, this machine's processes fail only
because their connections to it closed (first_failure.lost_peer). In both cases torchrun's own
report names this machine or one of its ranks, which is the survivor, not the cause; these lines
name the other machine(s) and their ranks instead. Read by distributed_run.py; torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from accel.cli.launch.rendezvous import RENDEZVOUS_TIMEOUT_S, machine_ranks, other_machines, wait_for_machine_0


def _machines(args: Any) -> int:
    """The most machines of the launch (torchrun's nnodes, '2' or '1:2')."""
    try:
        return int(str(getattr(args, "nnodes", "1")).split(":")[-1])
    except ValueError:
        return 1


def _static(args: Any) -> bool:
    return getattr(args, "rdzv_backend", "static") == "static" and not getattr(args, "standalone", False)


def _timeout(args: Any) -> int:
    """rdzv_timeout as given to torchrun (`--rdzv_conf timeout=N` or `join_timeout=N`)."""
    found = re.search(r"(?:^|,)(?:join_)?timeout=(\d+)", str(getattr(args, "rdzv_conf", "") or ""))
    return int(found.group(1)) if found else RENDEZVOUS_TIMEOUT_S


def _world(args: Any) -> str:
    try:
        return str(_machines(args) * int(args.nproc_per_node))
    except (TypeError, ValueError):
        return "?"


def machine_0_missing(args: Any) -> str | None:
    """On machine 1 or later (static rendezvous): None once machine 0's rendezvous port answers; the
    message to end with when it does not within rdzv_timeout."""
    if not _static(args) or _machines(args) < 2 or int(getattr(args, "node_rank", 0)) == 0:
        return None
    timeout = _timeout(args)
    if wait_for_machine_0(args.master_addr, int(args.master_port), timeout):
        return None
    return (
        f"machine 0 did not answer at {args.master_addr}:{args.master_port} within {timeout} s (rdzv_timeout), so "
        f"machine {args.node_rank} gave up: start `accel launch --machine_rank 0` there, check --main_process_ip and "
        "--main_process_port, and that no firewall blocks the port (--rdzv_timeout SECONDS sets the wait)"
    )


def rendezvous_timeout_line(args: Any, error: BaseException) -> str | None:
    """When the rendezvous timed out: the line naming the machines that did not join; else None."""
    text = str(error)
    if "timed out" not in text.lower() and "timeout" not in type(error).__name__.lower():
        return None
    machines, timeout = _machines(args), _timeout(args)
    this = int(getattr(args, "node_rank", 0))
    if not _static(args):
        return (
            f"not enough machines joined the rendezvous at {getattr(args, 'rdzv_endpoint', '?')} within {timeout} s "
            f"(rdzv_timeout; {getattr(args, 'nnodes', '?')} machines wanted): start `accel launch` on the missing "
            "ones with the same --rdzv_endpoint, or raise --rdzv_timeout"
        )
    if this > 0 and "connect" in text.lower():  # torch's own wait for machine 0 ran out
        return (
            f"could not reach machine 0 at {args.master_addr}:{args.master_port} within {timeout} s (rdzv_timeout): "
            "check --main_process_ip and --main_process_port, that machine 0 has started, and that no firewall "
            "blocks the port"
        )
    joined = re.search(r"(\d+)/(\d+) clients joined", text)
    count = f" ({int(joined.group(1)) - 1} of the other {machines - 1} joined)" if joined and machines > 2 else ""
    rank = str(1 - this) if machines == 2 else "N"
    return (
        f"{other_machines(this, machines)} did not join within {timeout} s (rdzv_timeout){count}: start "
        f"`accel launch --machine_rank {rank}` there with the same --main_process_ip and --main_process_port "
        "(--rdzv_timeout SECONDS sets the wait)"
    )


def lost_machine_line(
    args: Any, error: Any, first: dict[str, Any], stopped: Sequence[int], label: str
) -> str | None:
    """When this machine's processes failed only because another machine's left (its connections closed):
    the line naming that machine and its ranks; else None."""
    machines = _machines(args)
    if machines < 2 or not first.get("lost_peer"):
        return None
    failures = getattr(error, "failures", {})
    if any(failure.exitcode < 0 and rank not in stopped for rank, failure in failures.items()):
        return None  # a process here was killed: the cause is on this machine
    this = int(getattr(args, "node_rank", 0))
    if _static(args):
        per_machine = int(args.nproc_per_node)
        others = [m for m in range(machines) if m != this]
        ranks = machine_ranks(others[0], per_machine) if len(others) == 1 else "ranks not on this machine"
        lost, here = f"lost {other_machines(this, machines)} ({ranks} of {_world(args)})", f"machine {this}"
    else:
        lost, here = f"lost another machine (ranks not on this machine, of {_world(args)})", "this machine"
    return (
        f"accel launch: {label}: {lost} mid-run: its processes closed their connections (the machine or its launcher "
        f"was killed, ran out of memory, or the network failed); the processes of {here} failed because of it"
    )
