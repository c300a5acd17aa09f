"""Which process's failure caused the others, and one line for each process that only followed it.

When one process fails, the others fail too: their collectives lose the connection to it (gloo's
"Connection closed by peer"), or the launcher stops them. Which failure is reported first in time is
a race: a process that leaves without a word (`sys.exit(3)` where no report could be written, a
SIGKILL) closes its connections as it dies, and a peer can write its own report of the lost
connection before the launcher has even seen the exit. So the cause is decided after every process
has ended, from what each did, not from which report came first:

1. the first process to claim a failure of its own (an exception, or `sys.exit(N)`; first_failure.py);
2. else a process killed by a signal nobody in the job sent (the out-of-memory killer's SIGKILL);
3. else the earliest other failure of its own that a process recorded (a collective that timed out
   there can close the connections before that process's report is written);
4. else a process that exited with a non-zero status without any record (`os._exit(3)`);
5. else the first claim, a lost peer: the cause is elsewhere (another machine, see lost_machine.py).

A process that exited with status 0 is never the cause. Stdlib-only, as first_failure.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.cli.launch.first_failure import claim_record, failed_at, records

UNCAUGHT_EXCEPTION_STATUS = 1
"""Python's exit status when the script ends with an uncaught exception."""
_LINE_LIMIT = 160
"""Characters of an error message in a one-line report."""


@dataclass(frozen=True)
class Cause:
    """The failure that caused the others.

    rank: the process's rank; status: its exit status as torchrun reports it (negative: killed by that
    signal); record: what it wrote (first_failure.py), {} for a process that could write nothing.
    """

    rank: int
    status: int
    record: dict[str, Any] = field(default_factory=dict)


def find_cause(folder: Path, exits: Mapping[int, int], stopped: Collection[int]) -> Cause | None:
    """The cause among the processes that failed (`exits`: rank -> exit code, as torchrun's failures give
    them; `stopped`: the ranks the launcher stopped because another had failed), by the rules in this
    module's docstring; None when no process failed."""
    failed = {rank: code for rank, code in exits.items() if code != 0}
    if not failed:
        return None
    written = {record["rank"]: record for record in records(folder)}
    claim = claim_record(folder)
    if claim is not None and not claim.get("lost_peer") and claim["rank"] in failed:
        return _recorded(claim, failed[claim["rank"]])
    killed = sorted(rank for rank, code in failed.items() if code < 0 and rank not in stopped)
    if killed:
        return Cause(killed[0], failed[killed[0]], written.get(killed[0], {}))
    own = sorted((record for rank, record in written.items() if not record.get("lost_peer") and rank in failed),
                 key=failed_at)
    if own:
        return _recorded(own[0], failed[own[0]["rank"]])
    silent = sorted(rank for rank, code in failed.items() if rank not in stopped and rank not in written)
    if silent:
        return Cause(silent[0], failed[silent[0]])
    if claim is not None and claim["rank"] in failed:
        return _recorded(claim, failed[claim["rank"]])
    return None


def _recorded(record: dict[str, Any], code: int) -> Cause:
    """The cause of a process that wrote `record` and ended with `code`. A negative code there is the
    launcher's stop reaching it while it was ending (after another's failure): its own status is then
    the one it was on its way to, the SystemExit's or Python's for an uncaught exception."""
    status = code if code >= 0 else int(record.get("exit", UNCAUGHT_EXCEPTION_STATUS))
    return Cause(int(record["rank"]), status, record)


def follower_lines(folder: Path, cause: Cause | None, stopped: Collection[int] = ()) -> list[str]:
    """What to print before the final line about the cause, in rank order: one line for each process
    whose traceback was not printed (a repeat, or a process that lost its peer), the traceback of the
    cause itself when it only lost a peer (no failure of its own is known here), and one line for
    the processes the launcher stopped (`stopped`) because the cause had failed."""
    lines: list[str] = []
    written = records(folder)
    for record in written:
        if record.get("shown", True):
            continue
        if "traceback" in record and (cause is None or cause.rank == record["rank"]):
            lines.append(_prefixed(str(record["traceback"]), record["rank"]))
        else:
            lines.append(_follower_line(record, cause))
    quiet = [rank for rank in sorted(stopped) if rank not in {record["rank"] for record in written}]
    if cause is not None and cause.record.get("reason") != "timeout":  # a timeout's note names them (never_joined_line)
        lines.extend(_stopped_line([rank for rank in quiet if rank != cause.rank], cause.rank))
    return lines


def _follower_line(record: dict[str, Any], cause: Cause | None) -> str:
    """One line for a process whose traceback was not printed: it failed the same way as the first, or it
    stopped because the cause failed (named by the cause where known, else by the claim it found)."""
    last = str(record.get("summary", "")).strip().splitlines()[-1:] or ["?"]
    error = last[0] if len(last[0]) <= _LINE_LIMIT else last[0][: _LINE_LIMIT - 3] + "..."
    if record.get("same"):
        what = f"failed the same way as rank {record.get('first')} ({error}); its traceback is not repeated"
    else:
        first = cause.rank if cause is not None else record.get("first")
        where = f" in {record['operation']}" if record.get("operation") else ""
        what = f"stopped{where} because rank {first} failed first"
    return f"accel launch: rank {record.get('rank')} {what}"


def _stopped_line(ranks: list[int], cause: int) -> list[str]:
    """[] or one line naming the processes the launcher stopped, still running, because rank `cause` failed."""
    if not ranks:
        return []
    plural = len(ranks) > 1
    return [f"accel launch: rank{'s' if plural else ''} {', '.join(map(str, ranks))} "
            f"{'were' if plural else 'was'} stopped because rank {cause} failed first"]


def _prefixed(text: str, rank: int) -> str:
    """`text` (a traceback) with each line prefixed `[rank<N>]: `, as torch prints a worker's traceback."""
    return "\n".join(f"[rank{rank}]: {line}" if line else "" for line in text.rstrip("\n").split("\n"))
