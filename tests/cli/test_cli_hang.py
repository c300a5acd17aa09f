"""No hang outlives a minute, and nothing outlives `accel launch`.

Each case used to hang `accel launch` for 30 minutes or forever: rank 1 sleeping while rank 0
waits in an all-reduce or at wait_for_everyone(), or after rank 0 exited with status 0. Now a
collective ends at the collective timeout with an error naming the rank and the operation, and
the processes that outlive another's exit by rank_exit_grace are stopped and named. Killing
the launcher, even with SIGKILL, takes every process it started with it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")

HANG = """\
import os, sys, time
from pathlib import Path
import torch
from accel import Accelerator

accelerator = Accelerator()
Path(f"rank{accelerator.process_index}.pid").write_text(f"{os.getpid()} {os.getppid()}")
if accelerator.process_index == 1:
    time.sleep(600)
case = sys.argv[1]
if case == "all_reduce":
    accelerator.reduce(torch.ones(3))
elif case == "barrier":
    accelerator.wait_for_everyone()
"""


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def wait_gone(pids: list[int], seconds: float = 15) -> list[int]:
    """The pids still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def pids_of(folder: Path, name: str) -> tuple[int, int]:
    """(pid, parent pid) a script wrote to folder/name."""
    pid, parent = (folder / name).read_text().split()
    return int(pid), int(parent)


@pytest.fixture
def hang_script(tmp_path: Path) -> Path:
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    return script


def _launch_timed(run_accel, *args: str):
    start = time.monotonic()
    result = run_accel("launch", "--num_processes", "2", "--cpu", *args, timeout=90)
    return result, time.monotonic() - start


def test_a_stuck_all_reduce_ends_at_the_collective_timeout_naming_rank_and_operation(
    run_accel, hang_script: Path, tmp_path: Path
) -> None:
    result, seconds = _launch_timed(run_accel, "--collective_timeout", "3", str(hang_script), "all_reduce")
    assert result.returncode == 1 and seconds < 60, result.stderr
    assert "CollectiveError: rank 0 of 2: reduce waited 3 s (the collective timeout)" in result.stderr
    assert result.stderr.strip().splitlines()[-2:] == [
        ("accel launch: rank 1 of 2 never joined rank 0's reduce within the collective timeout; it was still "
         "running, and stopped"),
        "accel launch: hang.py exited with status 1 (rank 0 of 2)",
    ]
    assert wait_gone([pids_of(tmp_path, "rank1.pid")[0]]) == []


def test_a_stuck_wait_for_everyone_ends_with_the_timeout_from_the_config_file(
    run_accel, hang_script: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("collective_timeout: 3\n")
    result, seconds = _launch_timed(run_accel, "--config_file", str(config), str(hang_script), "barrier")
    assert result.returncode == 1 and seconds < 60, result.stderr
    assert "CollectiveError: rank 0 of 2: wait_for_everyone (barrier) waited 3 s" in result.stderr
    assert result.stderr.strip().splitlines()[-2:] == [
        ("accel launch: rank 1 of 2 never joined rank 0's wait_for_everyone (barrier) within the collective "
         "timeout; it was still running, and stopped"),
        "accel launch: hang.py exited with status 1 (rank 0 of 2)",
    ]


MAIN_ONLY_GATHER = """\
import torch
from accel import Accelerator

accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(2, 2))
if accelerator.is_main_process:
    accelerator.gather(torch.ones(1))  # a collective: every process must call it (save_state may run on one)
accelerator.wait_for_everyone()
"""


def test_a_collective_called_by_the_main_process_only_is_named_as_the_likely_cause(run_accel, tmp_path: Path) -> None:
    script = tmp_path / "save.py"
    script.write_text(MAIN_ONLY_GATHER)
    result, seconds = _launch_timed(run_accel, "--collective_timeout", "3", str(script))
    assert result.returncode == 1 and seconds < 60, result.stderr
    # Whichever rank's timeout ends first fails first: rank 0 in the gather, or rank 1 at the barrier.
    lines = result.stderr.strip().splitlines()
    assert re.fullmatch(r"accel launch: save\.py exited with status 1 \(rank [01] of 2\)", lines[-1])
    different = [re.fullmatch(
        r"accel launch: rank (\d) waited in (.+) while rank (\d) waited in (.+): the processes called different "
        r"collectives at this point \(a collective inside `if accelerator\.is_main_process:`, such as gather or reduce, "
        r"is a common cause\)", line) for line in lines]
    found = [match.groups() for match in different if match]
    assert len(found) == 1, result.stderr
    first, first_operation, other, other_operation = found[0]
    operations = {first: first_operation, other: other_operation}
    assert operations["1"] == "wait_for_everyone (barrier)" and operations["0"] != operations["1"]


def test_a_rank_that_outlives_the_others_is_stopped_and_named(run_accel, hang_script: Path, tmp_path: Path) -> None:
    result, seconds = _launch_timed(run_accel, "--rank_exit_grace", "3", str(hang_script), "exit")
    assert result.returncode == 1 and seconds < 60, result.stderr
    assert result.stderr.strip() == (
        "accel launch: hang.py: rank 1 of 2 did not finish within 3 s after rank 0 (status 0) exited, so accel "
        "stopped it. A process that outlives the others usually waits for something they never do (a collective "
        "that only some processes call) or hangs on its own; --rank_exit_grace SECONDS sets the wait."
    )
    assert wait_gone([pids_of(tmp_path, "rank1.pid")[0]]) == []


SLEEPER = """\
import os, sys, time
from pathlib import Path
Path(f"rank{os.environ.get('RANK', 'solo')}.pid").write_text(f"{os.getpid()} {os.getppid()}")
time.sleep(600)
"""


def _start_sleepers(tmp_path: Path, clean_env: dict[str, str], processes: int) -> tuple[subprocess.Popen, list[Path]]:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "accel", "launch", "--num_processes", str(processes), "--cpu", str(script)],
        cwd=tmp_path, env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    names = [tmp_path / ("rank0.pid" if processes > 1 else "ranksolo.pid")]
    names += [tmp_path / f"rank{r}.pid" for r in range(1, processes)]
    deadline = time.monotonic() + 60
    while not all(n.exists() and n.read_text() for n in names):
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.stderr.read().decode()
        time.sleep(0.1)
    return launcher, names


@pytest.mark.parametrize("processes", [1, 2])
def test_kill_9_of_the_launcher_leaves_nothing_running(tmp_path: Path, clean_env: dict[str, str], processes: int) -> None:
    launcher, names = _start_sleepers(tmp_path, clean_env, processes)
    started = {pid for name in names for pid in pids_of(tmp_path, name.name)} - {launcher.pid}
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    assert wait_gone(sorted(started)) == []  # the workers and, with 2 processes, torchrun's wrapper


def test_kill_9_of_the_torchrun_wrapper_takes_its_workers(tmp_path: Path, clean_env: dict[str, str]) -> None:
    launcher, names = _start_sleepers(tmp_path, clean_env, 2)
    workers = [pids_of(tmp_path, name.name)[0] for name in names]
    wrapper = pids_of(tmp_path, "rank0.pid")[1]
    os.kill(wrapper, signal.SIGKILL)
    assert launcher.wait(timeout=30) == 128 + signal.SIGKILL
    assert launcher.stderr.read().decode().strip().splitlines()[-1] == (
        f"accel launch: torch.distributed.run (running {tmp_path / 'sleeper.py'}) was stopped by SIGKILL: nothing in "
        "the process could report why; most often the kernel's out-of-memory killer (`dmesg` says so) or a job "
        "scheduler's limit"
    )
    assert wait_gone(workers) == []


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--collective_timeout", "0", "--collective_timeout=0 must be an int >= 1."),
    ("--rank_exit_grace", "soon", "--rank_exit_grace='soon' is not an integer; it must be an int >= 1."),
])
def test_bad_waits_are_refused_before_anything_starts(run_accel, hang_script: Path, one_error_line,
                                                       flag: str, value: str, message: str) -> None:
    result = run_accel("launch", "--num_processes", "2", flag, value, str(hang_script), "exit")
    assert result.returncode == 2
    assert one_error_line(result) == f"accel launch: {message}"
