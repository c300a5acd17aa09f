"""The stall watch's rule, on real state files: who is late, who is missing, and once per stall.

The end-to-end runs (real processes, real stacks) are in test_cli_stall.py; here the state files
are written by hand, and a worker's marks and stacks thread run in this process.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

import accel
from accel.cli.launch.stacks import caller, request_stacks, threads, traceback_lines
from accel.cli.launch.stall_watch import StallWatch
from accel.distributed import stall_marks
from accel.distributed.stall_marks import STATE_SIZE, label, read_marks, state_path


def write_state(folder: Path, rank: int, count: int, operation: str = "", pid: int = 0) -> None:
    data = struct.pack("=2q", count, pid or os.getpid()) + label(operation)
    assert len(data) == STATE_SIZE
    state_path(folder, rank).write_bytes(data)


def test_a_rank_late_in_a_collective_that_another_has_not_joined_is_reported_once(tmp_path: Path) -> None:
    watch = StallWatch(tmp_path, after=3, label="train.py", world="3")
    write_state(tmp_path, 0, 5, "gather")
    write_state(tmp_path, 1, 5, "gather")
    write_state(tmp_path, 2, 4)
    assert watch.check(100.0) is None  # first seen inside at 100
    assert watch.check(102.9) is None  # not yet late
    report = watch.check(103.0)
    assert report is not None
    assert report[0].startswith("accel launch: train.py: stall: ranks 0, 1 of 3 have waited 3 s in gather, which "
                                "rank 2 has not joined. Training goes on")
    assert "  rank 2 is in none of accel's collectives; it has exited" in report[-1]  # no stacks thread here
    assert watch.check(110.0) is None  # once per stall
    write_state(tmp_path, 0, 7, "gather")  # rank 0 left and entered the next gather: a new wait
    write_state(tmp_path, 1, 7, "gather")
    assert watch.check(111.0) is None
    assert watch.check(114.0) is not None


def test_no_report_while_every_rank_waits_in_the_same_collective_or_none_is_late(tmp_path: Path) -> None:
    watch = StallWatch(tmp_path, after=1, label="train.py", world="2")
    write_state(tmp_path, 0, 1, "wait_for_everyone (barrier)")
    write_state(tmp_path, 1, 3, "wait_for_everyone (barrier)")
    assert watch.check(0.0) is None and watch.check(50.0) is None  # slow for everyone, or a rank on another machine
    write_state(tmp_path, 1, 4)
    write_state(tmp_path, 0, 2)
    assert watch.check(60.0) is None


def test_a_rank_in_another_collective_is_named_with_it(tmp_path: Path) -> None:
    watch = StallWatch(tmp_path, after=2, label="train.py", world="2")
    write_state(tmp_path, 0, 1, "gather")
    write_state(tmp_path, 1, 0)
    assert watch.check(10.0) is None
    write_state(tmp_path, 1, 1, "wait_for_everyone (barrier)")
    assert watch.check(11.0) is None
    report = watch.check(12.5)
    assert report is not None and "rank 0 of 2 has waited 2 s in gather, which rank 1 has not joined" in report[0]
    assert report[-1].startswith("  rank 1 is in wait_for_everyone (barrier) (for 2 s);")


def test_read_marks_needs_a_complete_file(tmp_path: Path) -> None:
    assert read_marks(tmp_path / "rank0.state") is None
    (tmp_path / "rank0.state").write_bytes(b"\0" * 10)
    assert read_marks(tmp_path / "rank0.state") is None
    write_state(tmp_path, 0, 3, "reduce", pid=42)
    marks = read_marks(tmp_path / "rank0.state")
    assert marks is not None and (marks.count, marks.operation, marks.pid, marks.inside) == (3, "reduce", 42, True)


@pytest.fixture
def marked(tmp_path: Path):
    """This process as a worker under a stall watch (rank 0), restored afterwards."""
    saved = (stall_marks._view[0], stall_marks._mapping[0], stall_marks._count[0])
    stall_marks.open_marks(tmp_path, "0")
    yield tmp_path
    stall_marks._view[0], stall_marks._mapping[0], stall_marks._count[0] = saved


def test_marks_count_in_and_out_and_the_outer_operation_counts(marked: Path) -> None:
    outer, inner = label("gather_for_metrics"), label("gather")
    assert stall_marks.enter(outer)
    marks = read_marks(state_path(marked, 0))
    assert marks is not None and marks.inside and marks.operation == "gather_for_metrics" and marks.pid == os.getpid()
    assert not stall_marks.enter(inner)  # nested: not marked
    stall_marks.leave()
    after = read_marks(state_path(marked, 0))
    assert after is not None and not after.inside and after.count == marks.count + 1


def test_the_stacks_thread_answers_with_every_thread(marked: Path) -> None:
    release = threading.Event()

    def helper_waits() -> None:
        release.wait(30)

    helper = threading.Thread(target=helper_waits, name="helper")
    helper.start()
    try:
        dump = request_stacks(marked, [0])[0]
    finally:
        release.set()
        helper.join()
    assert dump is not None
    names = [header for header, _ in threads(dump)]
    assert any(name.startswith("thread MainThread ") for name in names) and any("helper" in n for n in names)
    lines = traceback_lines(dump)
    assert any("release.wait(30)" in line for line in lines)
    assert "test_stall_watch.py" in (caller(dump, (str(Path(accel.__file__).parent),)) or "")
    assert request_stacks(marked, [5]) == {5: None}  # no such rank: no answer, no wait
