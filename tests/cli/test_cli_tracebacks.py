"""One traceback for one failure: when every rank fails the same way, the first rank's traceback
is printed, and one line for each of the others (before, each rank printed its own copy)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SAME = """\
import sys
{before}
def check(value):
    raise ValueError(f"bad value {{value!r}}")
check(sys.argv[1])
"""

BARRIER = """\
import os, time
from pathlib import Path
def wait_for_the_other():  # both ranks raise at about the same moment, without a process group
    Path(f"ready{os.environ['RANK']}").touch()
    while not Path(f"ready{1 - int(os.environ['RANK'])}").exists():
        time.sleep(0.01)
wait_for_the_other()
"""

REPEAT = re.compile(
    r"^accel launch: rank (\d) failed the same way as rank (\d) \(ValueError: bad value 'x'\); "
    r"its traceback is not repeated$", re.MULTILINE,
)


def _launch(run_accel, tmp_path: Path, text: str):
    script = tmp_path / "crash.py"
    script.write_text(text)
    return run_accel("launch", "--num_processes", "2", "--cpu", str(script), "x", timeout=90)


@pytest.mark.parametrize("before", [
    pytest.param("from accel import Accelerator\nAccelerator()", id="after-the-process-group"),
    pytest.param(BARRIER, id="before-any-process-group"),
])
def test_the_same_failure_on_both_ranks_is_one_traceback_and_one_line(run_accel, tmp_path: Path, before: str) -> None:
    result = _launch(run_accel, tmp_path, SAME.format(before=before))
    assert result.returncode == 1
    assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
    assert result.stderr.count("ValueError: bad value 'x'") == 2  # the traceback's last line, and the one line
    repeats = REPEAT.findall(result.stderr)
    assert len(repeats) == 1 and {int(r) for r in repeats[0]} == {0, 1}, result.stderr
    first = int(repeats[0][1])
    assert result.stderr.strip().splitlines()[-1] == f"accel launch: crash.py exited with status 1 (rank {first} of 2)"
    # the traceback reads as the script's own: no frame of accel's worker bootstrap or of runpy
    assert re.search(re.escape(f'File "{tmp_path / "crash.py"}", line ') + r"\d+, in check", result.stderr)
    assert "accel/cli/launch/worker.py" not in result.stderr and "runpy" not in result.stderr


EXIT_TOGETHER = """\
import atexit
def exit_together():  # after the traceback is written: neither rank exits (and has the other stopped) before both wrote theirs
    Path(f"wrote{os.environ['RANK']}").touch()
    deadline = time.monotonic() + 30
    while not Path(f"wrote{1 - int(os.environ['RANK'])}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
atexit.register(exit_together)
"""


def test_different_failures_keep_their_own_tracebacks(run_accel, tmp_path: Path) -> None:
    # The first rank to exit with an error has the launcher stop the other at once (as torchrun does),
    # which could cut the other's traceback short on a busy machine: the ranks exit together here.
    text = BARRIER + EXIT_TOGETHER + "raise ValueError(f\"rank {os.environ['RANK']} has its own problem\")\n"
    result = _launch(run_accel, tmp_path, text)
    assert result.returncode == 1
    assert result.stderr.count("Traceback (most recent call last)") == 2, result.stderr
    assert "ValueError: rank 0 has its own problem" in result.stderr
    assert "ValueError: rank 1 has its own problem" in result.stderr


SLOW_SECOND_FAILURE = """\
import os, time
from pathlib import Path
class SlowError(ValueError):
    said = False
    def __str__(self):  # first read inside rank 1's excepthook: rank 0 fails now, while rank 1 is busy
        if not SlowError.said:
            SlowError.said = True
            Path("rank1-reporting").touch()
            time.sleep(3)
        return "rank 1 has its own problem"
if os.environ["RANK"] == "0":
    while not Path("rank1-reporting").exists():
        time.sleep(0.01)
    raise ValueError("rank 0 has its own problem")
raise SlowError()
"""


def test_a_rank_stopped_while_writing_its_own_traceback_finishes_writing_it(run_accel, tmp_path: Path) -> None:
    # Rank 0 fails while rank 1's excepthook is still at work; the launcher stops rank 1 at once
    # (as torchrun does): the stop waits until rank 1's traceback is out.
    result = _launch(run_accel, tmp_path, SLOW_SECOND_FAILURE)
    assert result.returncode == 1
    assert result.stderr.count("Traceback (most recent call last)") == 2, result.stderr
    assert "ValueError: rank 0 has its own problem" in result.stderr
    assert "SlowError: rank 1 has its own problem" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "accel launch: crash.py exited with status 1 (rank 0 of 2)"


def test_a_rank_stopped_by_the_others_failure_adds_no_traceback(run_accel, tmp_path: Path) -> None:
    text = """\
import torch
from accel import Accelerator
accelerator = Accelerator()
if accelerator.process_index == 0:
    raise ValueError("bad value 'x'")
accelerator.reduce(torch.ones(1))  # rank 1 waits here for rank 0, which has failed
"""
    result = _launch(run_accel, tmp_path, text)
    assert result.returncode == 1
    assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "accel launch: crash.py exited with status 1 (rank 0 of 2)"
    stopped = [line for line in result.stderr.splitlines() if line.startswith("accel launch: rank 1")]
    assert stopped in (
        ["accel launch: rank 1 stopped in reduce because rank 0 failed first"],  # it saw rank 0 leave
        ["accel launch: rank 1 was stopped because rank 0 failed first"],  # the launcher stopped it before
    ), result.stderr


def test_a_rank_killed_from_outside_is_named_as_the_cause_not_the_rank_it_left_behind(run_accel, tmp_path: Path) -> None:
    # Rank 1 dies as the out-of-memory killer would kill it; rank 0 then fails in its barrier,
    # only because rank 1 left: the report names rank 1 and its signal, not rank 0's error.
    text = """\
import os, signal
from accel import Accelerator
accelerator = Accelerator()
if accelerator.process_index == 1:
    os.kill(os.getpid(), signal.SIGKILL)
accelerator.wait_for_everyone()
"""
    result = _launch(run_accel, tmp_path, text)
    assert result.returncode == 128 + 9
    assert result.stderr.strip().splitlines()[-1] == (
        "accel launch: crash.py was stopped by SIGKILL (rank 1 of 2): nothing in the process could report why; "
        "most often the kernel's out-of-memory killer (`dmesg` says so) or a job scheduler's limit"
    )
