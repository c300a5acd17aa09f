"""Stop the processes that have not finished some time after another one exited.

torch.distributed.run waits for every worker until one fails: when rank 0 exits with status 0
and rank 1 hangs (a sleep, a collective rank 0 never called, a dead lock in I/O), it waits
forever. `GraceAgent` is torchrun's own LocalElasticAgent with one more rule: once a worker has
exited, the others get `grace` seconds to exit too; then they are stopped (SIGTERM, SIGKILL a
few seconds later) and RanksDidNotFinish names them. A worker that exits with an error still
stops the others at once, as torchrun does.

The rule sees the workers of this machine: on several machines each machine's launcher applies
it to its own processes.

After each rendezvous the agent also names the round for its workers (`round_name`): their process
group's store keys carry it, so that a restarted attempt never reads the addresses of the one before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

DEFAULT_GRACE_S = 30
"""Seconds the others may run after the first worker exited, when rank_exit_grace is not given."""
STOP_TIMEOUT_S = 5
"""Seconds a stopped worker gets between SIGTERM and SIGKILL."""


class RanksDidNotFinish(Exception):
    """Raised by the agent after it stopped the workers that outlived the grace period."""

    def __init__(self, stuck: list[int], exited: dict[int, int], grace: float) -> None:
        self.stuck, self.exited, self.grace = stuck, exited, grace
        super().__init__(f"ranks {stuck} did not finish within {grace:g} s of ranks {sorted(exited)} exiting")


OnRestart = Callable[[dict[int, Any], int, int], None]
"""Called before torchrun restarts the workers: (rank -> failure of the attempt that failed, restart number, most restarts)."""
BeforeStop = Callable[[list[int]], None]
"""Called once a worker has failed, before torchrun stops the others: the ranks still running."""


def _grace_agent(
    base: type[LocalElasticAgent], grace: float, seen: dict[str, Any], on_restart: OnRestart | None,
    before_stop: BeforeStop | None = None,
) -> type[LocalElasticAgent]:
    """A subclass of torchrun's LocalElasticAgent (`base`) that enforces `grace`.

    When torchrun stops the workers, `seen["running"]` lists the ranks that were still running at that
    moment, which it stopped (by a signal) and which therefore did not fail on their own: after a
    collective timeout, those that never joined it (see _note_stop).
    Before a restart (max_restarts), `on_restart` is told which workers failed; when a worker has
    failed, `before_stop` is told which are still running, before torchrun stops them.
    """
    from torch.distributed.elastic.agent.server.api import WorkerState

    class GraceAgent(base):  # type: ignore[valid-type,misc]  # a base class given at run time
        _first_exit: float | None = None
        _failures: dict[int, Any] = {}  # noqa: RUF012 - replaced, never changed in place

        def _restart_workers(self, worker_group: Any) -> None:
            self._first_exit = None
            if on_restart is not None and self._failures:  # not a restart for a machine joining (c10d)
                spec = worker_group.spec
                on_restart(self._failures, spec.max_restarts - self._remaining_restarts, spec.max_restarts)
            self._failures = {}
            super()._restart_workers(worker_group)

        def _rendezvous(self, worker_group: Any) -> None:
            super()._rendezvous(worker_group)
            from accel.distributed.process_group import ROUND_VARIABLE

            os.environ[ROUND_VARIABLE] = round_name(worker_group.store, worker_group.group_rank)  # the workers inherit it

        def _monitor_workers(self, worker_group: Any) -> Any:
            _note_stop(self._pcontext, worker_group, seen, before_stop)
            result = super()._monitor_workers(worker_group)  # on a failure, it stops the others at once
            if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY):
                self._failures = dict(result.failures)
            if result.state != WorkerState.HEALTHY:
                return result
            codes = _exit_codes(self._pcontext, worker_group)
            exited = {rank: code for rank, code in codes.items() if code is not None}
            if not exited:
                return result
            now = time.monotonic()
            if self._first_exit is None:
                self._first_exit = now
            elif now - self._first_exit >= grace:
                stuck = sorted(rank for rank, code in codes.items() if code is None)
                self._pcontext.close(signal.SIGTERM, STOP_TIMEOUT_S)
                raise RanksDidNotFinish(stuck, exited, grace)
            return result

    return GraceAgent


ROUND_KEY = "accel_round"


def round_name(store: Any, group_rank: int) -> str:
    """A name this rendezvous round's workers share on every machine, and no other round has.

    Machine 0's agent draws it and every agent reads it from the round's store: under c10d torch keys that
    store by the round, and a static rendezvous with restarts has one machine, whose agent writes and reads
    it. torchrun's restart count cannot serve: each machine counts only its own workers' failures, so a
    machine that restarts because another rejoined the rendezvous keeps 0 where the other has 1, and their
    workers, keyed apart, would each wait for the other's address until the collective timeout.
    Example: `round_name(worker_group.store, worker_group.group_rank)` -> 'f3a9...'.
    """
    if group_rank == 0:
        store.set(ROUND_KEY, uuid.uuid4().hex)
    return bytes(store.get(ROUND_KEY)).decode()


def _exit_codes(pcontext: Any, worker_group: Any) -> dict[int, int | None]:
    """Global rank -> exit code, or None while the worker runs (for workers started as subprocesses)."""
    handlers = getattr(pcontext, "subprocess_handlers", {}) or {}
    return {
        worker_group.workers[local_rank].global_rank: handler.proc.poll()
        for local_rank, handler in handlers.items()
    }


_NOTED = "_accel_stop_noted"
"""Marks a process context whose close _note_stop already wraps."""


def _note_stop(pcontext: Any, worker_group: Any, seen: dict[str, Any], before_stop: BeforeStop | None) -> None:
    """Wrap `pcontext.close` (once) so that the ranks still running when torchrun first closes it are noted
    in `seen["running"]`, and `before_stop` is told them when a worker has failed, just before they are stopped.

    Noted at the stop itself, not at a poll before it: a worker that exits (or is killed from outside)
    between that poll and torchrun's own is one that ended on its own, and must not be taken for one
    that the launcher stopped. A process context that cannot be wrapped is left as it is.
    """
    if pcontext is None or getattr(pcontext, _NOTED, False):
        return
    close, done = pcontext.close, list[bool]()

    def noting_close(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            codes = _exit_codes(pcontext, worker_group)
            running = sorted(rank for rank, code in codes.items() if code is None)
            seen["running"] = running
            if before_stop is not None and running and any(codes.values()):
                before_stop(running)
        return close(*args, **kwargs)

    try:
        pcontext.close = noting_close
        setattr(pcontext, _NOTED, True)
    except AttributeError:
        return


@contextlib.contextmanager
def rank_exit_grace(
    grace: float, on_restart: OnRestart | None = None, before_stop: BeforeStop | None = None
) -> Iterator[dict[str, Any]]:
    """While inside, torch.distributed.run's launcher uses the grace-period agent; yields what it saw
    (`"running"`: the ranks still running when torchrun stopped the workers). `on_restart`, `before_stop`: see their types."""
    from torch.distributed.launcher import api

    original = api.LocalElasticAgent
    seen: dict[str, Any] = {}
    api.LocalElasticAgent = _grace_agent(original, grace, seen, on_restart, before_stop)  # type: ignore[misc]  # patched for the block
    try:
        yield seen
    finally:
        api.LocalElasticAgent = original  # type: ignore[misc]  # restored
