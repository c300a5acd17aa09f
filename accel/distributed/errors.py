"""Turn a collective that failed on the wire into an error naming the process and the operation.

When another process does not reach a collective in time, gloo raises `RuntimeError: [...
unbound_buffer.cc:78] Timed out waiting 1800000ms for recv operation to complete`, and when it
has died, `Connection closed by peer`: neither says which process waited, in what, or what to
do. accel's collectives (gather, reduce, broadcast, wait_for_everyone, ...) are wrapped by
`named_collective`, which raises CollectiveError instead, from the original error. nccl
timeouts are reported by torch's own watchdog, which names the rank and the operation itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch.distributed as dist

from accel.distributed import stall_marks

F = TypeVar("F", bound=Callable[..., Any])

_TIMEOUT_MARKS = ("timed out", "timeout")
_PEER_GONE_MARKS = ("connection closed by peer", "connection reset by peer", "broken pipe")


class CollectiveError(RuntimeError):
    """A collective operation that could not complete: this process's rank, the operation and why."""

    def __init__(self, message: str, *, rank: int | str, operation: str, reason: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.operation = operation
        self.reason = reason
        """'timeout' (some process never joined) or 'peer left' (a process ended while this one waited)."""


def named_collective(operation: str) -> Callable[[F], F]:
    """Decorate an accel collective so that a timeout or a lost peer raises CollectiveError naming `operation`.

    Under `accel launch`, the call is also marked as a wait in `operation` (stall_marks.py), so that the
    launcher can report a process that is missing from it; otherwise it costs one extra Python frame.
    """
    name = stall_marks.label(operation)

    def wrap(function: F) -> F:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            marked = stall_marks.enter(name)
            try:
                return function(*args, **kwargs)
            except CollectiveError:
                raise
            except RuntimeError as error:
                named = describe(error, operation)
                if named is None:
                    raise
                raise named from error
            finally:
                if marked:
                    stall_marks.leave()

        return cast(F, call)  # functools.wraps keeps function's signature

    return wrap


def describe(error: BaseException, operation: str) -> CollectiveError | None:
    """The CollectiveError for `error` raised inside `operation`, or None when it is not a transport failure."""
    from accel.distributed.process_group import timeout_in_force

    text = str(error).lower()
    rank, world = _place()
    where = f"rank {rank} of {world}"
    if any(mark in text for mark in _PEER_GONE_MARKS):
        reason = "peer left"
        message = (
            f"{where}: {operation} failed because another process left the job while this one waited (its "
            "connection closed): that process failed (its own error, above or in its log, is the cause) or "
            f"finished without calling {operation} here."
        )
    elif any(mark in text for mark in _TIMEOUT_MARKS):
        reason = "timeout"
        message = (
            f"{where}: {operation} waited {timeout_in_force():g} s (the collective timeout) for the other processes "
            "and at least one never joined it: it is stuck, far slower, or does not call it at this point "
            "(a collective inside `if accelerator.is_main_process:` is a common cause). If it is only slow, raise the "
            "timeout: InitProcessGroupKwargs(timeout=...), `accel launch --collective_timeout SECONDS` or "
            "ACCEL_COLLECTIVE_TIMEOUT."
        )
    else:
        return None
    return CollectiveError(message, rank=rank, operation=operation, reason=reason)


def _place() -> tuple[int | str, int | str]:
    """(this process's rank, the number of processes), or '?' when no group exists any more."""
    try:
        return dist.get_rank(), dist.get_world_size()
    except (RuntimeError, ValueError):
        return "?", "?"
