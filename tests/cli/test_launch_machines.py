"""Several machines, as two `accel launch` commands on this host (127.0.0.1): a machine that never joins ends the
launch within rdzv_timeout, naming it; a machine lost mid-run ends the job soon, and the last line names it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent

LOOP = """\
import sys, time
from pathlib import Path
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(2)
for step in range(3000):
    dist.all_reduce(t)
    if step == 2:
        Path(sys.argv[1], f"running{dist.get_rank()}").touch()
    time.sleep(0.05)
dist.destroy_process_group()
"""
"""Runs for minutes unless a peer is lost; each rank says when it is running."""

CPP_DUMP_MARKS = ("Exception raised from", "frame #", "c10::", "socket.cpp", "TCPStore.cpp")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(clean_env: dict[str, str]) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    paths = [root, clean_env.get("PYTHONPATH", "")]
    return {**clean_env, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _machine(rank: int, port: int, *flags: str, script: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "accel", "launch", "--cpu", "--num_machines", "2", "--num_processes", "2",
        "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port), *flags,
        *script,
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.mark.parametrize("present", [0, 1])
def test_a_machine_that_never_joins_ends_the_launch_naming_it(present: int, clean_env: dict[str, str],
                                                              tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    start = time.monotonic()
    alone = _machine(present, _free_port(), "--rdzv_timeout", "3", script=[str(script), str(tmp_path)],
                     env=_env(clean_env))
    out, err = alone.communicate(timeout=90)
    seconds = time.monotonic() - start
    assert alone.returncode == 1, err
    assert seconds < 45  # 3 s of waiting, plus importing torch on a busy machine
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert not any(mark in err for mark in CPP_DUMP_MARKS), err
    absent = 1 - present
    assert f"machine {absent} did not" in lines[0] and "within 3 s (rdzv_timeout)" in lines[0]
    assert f"machine {present} did not" not in lines[0]  # machine 0 waiting does not blame machine 0
    assert not list(tmp_path.glob("running*"))


def test_a_machine_killed_mid_run_ends_the_job_and_is_named_last(clean_env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    port, env = _free_port(), _env(clean_env)
    first = _machine(0, port, "--rdzv_timeout", "30", script=[str(script), str(tmp_path)], env=env)
    second = _machine(1, port, "--rdzv_timeout", "30", script=[str(script), str(tmp_path)], env=env)
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "running1").exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
        assert (tmp_path / "running1").exists(), first.communicate(timeout=30)[1]
        os.killpg(second.pid, signal.SIGKILL)  # the whole machine: its launcher, wrapper and workers
        killed = time.monotonic()
        _, err = first.communicate(timeout=90)
        assert time.monotonic() - killed < 60
    finally:
        for process in (first, second):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert first.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("accel launch: loop.py: lost machine 1 (rank 1 of 2) mid-run"), err
    assert "machine 0 failed because of it" in last


RESTART_SCRIPT = HERE.parent / "distributed" / "two_processes" / "restart_script.py"


def test_restarts_across_machines_resume_to_the_uninterrupted_weights(clean_env: dict[str, str],
                                                                       tmp_path: Path) -> None:
    """rdzv_backend c10d: rank 1 (machine 1) crashes once while rank 0 is busy outside any collective; machine 1
    restarts for the failure, machine 0 because machine 1 rejoined (its restart count stays 0), and both resume
    from the checkpoint. Keyed by the restart count, their new processes waited for each other's address."""
    env = {**_env(clean_env), "DISTRIBUTED_TEST_RESULTS": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(RESTART_SCRIPT.parent), env["PYTHONPATH"]])
    port = _free_port()
    flags = ("--rdzv_backend", "c10d", "--max_restarts", "1", "--rdzv_timeout", "30")
    script = [str(RESTART_SCRIPT), str(tmp_path / "project"), str(tmp_path / "crashed")]
    first = _machine(0, port, *flags, script=script, env=env)
    processes = [first]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # machine 0 serves the rendezvous, as on a cluster: start it first
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        processes.append(_machine(1, port, *flags, script=script, env=env))
        errors = _outputs(processes, timeout=240)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert [process.returncode for process in processes] == [0, 0], errors
    assert (tmp_path / "crashed").exists()
    lines = {rank: (tmp_path / f"rank{rank}.jsonl").read_text().splitlines() for rank in (0, 1)}
    assert all(rank_lines[:2] == ['["started_at", 0]', '["started_at", 6]'] for rank_lines in lines.values())
    params = [next(line for line in rank_lines if line.startswith('["params"')) for rank_lines in lines.values()]
    assert params[0] == params[1] == _uninterrupted_params(env, tmp_path / "plain")


def _outputs(processes: list[subprocess.Popen[str]], timeout: float) -> list[str]:
    """Each machine's stderr once all have ended; if one is still running at `timeout`, every machine is killed
    and the test fails with what each had printed (a stall report included), not a bare TimeoutExpired."""
    deadline = time.monotonic() + timeout
    try:
        return [process.communicate(timeout=max(1.0, deadline - time.monotonic()))[1] for process in processes]
    except subprocess.TimeoutExpired:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        printed = [f"machine {rank}: {process.communicate()[1][-3000:]}" for rank, process in enumerate(processes)]
        pytest.fail(f"still running after {timeout} s:\n" + "\n".join(printed))


def _uninterrupted_params(env: dict[str, str], folder: Path) -> str:
    folder.mkdir()
    command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", "2", str(RESTART_SCRIPT),
               str(folder / "project")]
    done = subprocess.run(command, env={**env, "DISTRIBUTED_TEST_RESULTS": str(folder)}, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return next(line for line in (folder / "rank0.jsonl").read_text().splitlines() if line.startswith('["params"'))
