"""Which failure the launcher reports when several processes failed: the one that caused the others."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from accel.cli.launch.cause import Cause, find_cause, follower_lines
from accel.cli.launch.first_failure import FIRST, FirstFailure, first_record, lost_peer, system_exit_status
from accel.cli.launch.rank_grace import _note_stop
from accel.distributed.errors import CollectiveError


def _write(folder: Path, rank: int, **fields: object) -> Path:
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps({"rank": str(rank), "summary": f"error {rank}", "shown": True, **fields}))
    return path


def test_a_timeout_is_a_failure_of_its_own_and_a_peer_that_left_is_not() -> None:
    assert lost_peer(CollectiveError("m", rank=0, operation="reduce", reason="peer left"))
    assert not lost_peer(CollectiveError("m", rank=0, operation="reduce", reason="timeout"))
    assert lost_peer(RuntimeError("[pair.cc:537] Read error: Connection reset by peer"))
    assert not lost_peer(ValueError("bad value"))


def test_the_first_claim_is_reported_unless_it_only_lost_a_peer_to_another_failure(tmp_path: Path) -> None:
    os.link(_write(tmp_path, 0, lost_peer=True, reason="peer left", operation="gather_object"), tmp_path / FIRST)
    assert first_record(tmp_path)["rank"] == 0  # nobody else failed on its own: the claim stands
    _write(tmp_path, 1, lost_peer=False, reason="timeout", operation="wait_for_everyone (barrier)")
    cause = first_record(tmp_path)
    assert cause["rank"] == 1 and cause["reason"] == "timeout" and cause["operation"] == "wait_for_everyone (barrier)"


def test_a_first_claim_of_its_own_stands(tmp_path: Path) -> None:
    os.link(_write(tmp_path, 1, lost_peer=False, reason=None), tmp_path / FIRST)
    _write(tmp_path, 0, lost_peer=False, reason=None)
    assert first_record(tmp_path)["rank"] == 1


def test_no_claim_is_no_record(tmp_path: Path) -> None:
    assert first_record(tmp_path) == {}


def _claim(folder: Path, rank: int, **fields: object) -> None:
    os.link(_write(folder, rank, **fields), folder / FIRST)


LOST = {"lost_peer": True, "shown": False, "traceback": "Traceback (most recent call last):\nRuntimeError: closed\n"}
"""A record of a process that lost its peer before anyone claimed a failure (first_failure.FirstFailure)."""


def test_a_rank_that_exited_on_its_own_is_the_cause_even_after_a_peer_claimed_first(tmp_path: Path) -> None:
    # Rank 0 lost its connection to rank 1 and wrote its report before rank 1's sys.exit(3) was recorded.
    _claim(tmp_path, 0, **LOST, at=1.0)
    _write(tmp_path, 1, lost_peer=False, exit=3, at=2.0)
    assert find_cause(tmp_path, {0: 1, 1: 3}, stopped=[]) == Cause(1, 3, first_record(tmp_path))
    assert follower_lines(tmp_path, Cause(1, 3)) == ["accel launch: rank 0 stopped because rank 1 failed first"]


def test_a_rank_that_left_no_record_is_the_cause_rather_than_the_peer_it_left(tmp_path: Path) -> None:
    _claim(tmp_path, 0, **LOST)
    assert find_cause(tmp_path, {0: 1, 1: 3}, stopped=[]) == Cause(1, 3)  # os._exit(3): a status, no record
    assert find_cause(tmp_path, {0: -15, 1: -9}, stopped=[0]) == Cause(1, -9)  # killed from outside
    assert find_cause(tmp_path, {0: 1, 1: -15}, stopped=[1]).rank == 0  # rank 1 only stopped: the loss is the cause


def test_a_rank_the_launcher_stopped_is_never_the_cause_and_is_said_to_have_followed(tmp_path: Path) -> None:
    _claim(tmp_path, 2, lost_peer=False, exit=3)
    cause = find_cause(tmp_path, {0: -15, 1: -15, 2: 3}, stopped=[0, 1])
    assert cause == Cause(2, 3, first_record(tmp_path))
    assert follower_lines(tmp_path, cause, stopped=[0, 1]) == [
        "accel launch: ranks 0, 1 were stopped because rank 2 failed first"
    ]


def test_a_cause_stopped_while_ending_keeps_the_status_it_was_on_its_way_to(tmp_path: Path) -> None:
    _claim(tmp_path, 1, lost_peer=False, exit=3)
    assert find_cause(tmp_path, {1: -15}, stopped=[1]) == Cause(1, 3, first_record(tmp_path))
    (tmp_path / FIRST).unlink()
    _claim(tmp_path, 0, lost_peer=False)  # an uncaught exception: Python's status 1
    assert find_cause(tmp_path, {0: -15}, stopped=[0]).status == 1


def test_a_lost_peer_with_no_cause_here_prints_its_own_traceback(tmp_path: Path) -> None:
    # The peer was on another machine: nothing here failed on its own, so the kept traceback is printed.
    _claim(tmp_path, 0, **LOST)
    cause = find_cause(tmp_path, {0: 1}, stopped=[])
    assert cause is not None and cause.rank == 0
    assert follower_lines(tmp_path, cause) == ["[rank0]: Traceback (most recent call last):\n[rank0]: RuntimeError: closed"]


def test_nothing_failed_is_no_cause(tmp_path: Path) -> None:
    assert find_cause(tmp_path, {}, stopped=[]) is None
    assert find_cause(tmp_path, {0: 0}, stopped=[]) is None


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), (256, 0), (-1, 255), ("bad input", 1)])
def test_system_exit_status_is_pythons(code: object, status: int) -> None:
    assert system_exit_status(code) == status


def test_a_system_exit_is_recorded_as_a_failure_of_its_own(tmp_path: Path) -> None:
    FirstFailure(tmp_path, "1", None).exited(0)
    assert not (tmp_path / FIRST).exists()  # a success is no failure
    FirstFailure(tmp_path, "1", None).exited(3)
    record = first_record(tmp_path)
    assert (record["rank"], record["exit"], record["lost_peer"], record["shown"]) == (1, 3, False, True)


def test_a_lost_peer_claiming_first_prints_nothing_and_keeps_its_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = FirstFailure(tmp_path, "0", lambda kind, value, tb: print(f"printed {value}", file=sys.stderr))
    hook(RuntimeError, RuntimeError("[pair.cc:553] Connection closed by peer"), None)
    record = first_record(tmp_path)
    assert record["lost_peer"] and not record["shown"]
    assert record["traceback"] == "printed [pair.cc:553] Connection closed by peer\n"  # what it would have printed
    assert capsys.readouterr().err == ""  # printed by the launcher only if no other process failed on its own


class _Process:
    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


class _Context:
    """A stand-in for torchrun's SubprocessContext: two workers, and a close that ends the one still running."""

    def __init__(self) -> None:
        self.subprocess_handlers = {0: type("H", (), {"proc": _Process(None)})(), 1: type("H", (), {"proc": _Process(None)})()}
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
        self.subprocess_handlers[0].proc.code = -15


def test_the_ranks_stopped_are_the_ones_running_when_torchrun_closes_not_at_an_earlier_poll() -> None:
    group = type("G", (), {"workers": [type("W", (), {"global_rank": 0})(), type("W", (), {"global_rank": 1})()]})()
    context, seen, told = _Context(), {}, []
    _note_stop(context, group, seen, told.append)
    context.subprocess_handlers[1].proc.code = -9  # killed from outside after the agent's last poll
    context.close()
    context.close()  # a second close (the agent's shutdown) changes nothing
    assert seen["running"] == [0] and told == [[0]] and context.closed == 2
