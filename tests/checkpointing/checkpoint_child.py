"""A child process for the checkpoint tests: it runs checkpoint_scenario jobs.

    python checkpoint_child.py run JOBS_JSON   run the jobs (a JSON list) one after another
    python checkpoint_child.py serve           a fork server, for tests that start many processes

Importing torch takes a second or more, so the fork server imports it once and forks a fresh
process for each request: a real process, killed by a real SIGKILL, writing real files. Each
request is one JSON line on stdin:

    {"jobs": [...], "log": path, "kill_after": seconds | null, "die_at": n | null}

kill_after: the server SIGKILLs the process that many seconds after it has set up (resumed).
die_at: the process SIGKILLs itself just before its n-th fsync / rename / rmtree after set-up,
which stops it at a chosen step of save_state. The reply is one JSON line:

    {"outcome": "exited" | "killed", "code": exit status, "seconds": run time after set-up}
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import sys
import time
import traceback
from typing import Any

import torch

from checkpoint_scenario import Job, run


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    if argv[1] == "run":
        for job in json.loads(argv[2]):
            run(Job(**job))
        return 0
    if argv[1] == "serve":
        importlib.import_module("torch._dynamo")  # optimizers import it lazily: 2 s that each fork then skips

        for line in sys.stdin:
            sys.stdout.write(json.dumps(_serve(json.loads(line))) + "\n")
            sys.stdout.flush()
        return 0
    raise SystemExit(f"unknown mode {argv[1]!r}; use run or serve")


def _serve(request: dict[str, Any]) -> dict[str, Any]:
    """Fork a process for `request`, kill it if asked, and report how it ended."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(request, write_end)
    os.close(write_end)
    ready = os.read(read_end, 1)  # b"" when the child ended before setting up
    os.close(read_end)
    started = time.perf_counter()
    deadline = started + request["kill_after"] if ready and request.get("kill_after") is not None else None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if deadline is not None and time.perf_counter() >= deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.0002)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    return {"outcome": "killed" if killed else "exited", "code": code, "seconds": time.perf_counter() - started}


def _child(request: dict[str, Any], ready_end: int) -> None:
    """The forked process: run the jobs, report set-up through `ready_end`, never return."""
    code = 1
    try:
        with open(request["log"], "a") as log:
            os.dup2(log.fileno(), 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)

        def ready() -> None:
            nonlocal signalled
            if not signalled:
                signalled = True
                if request.get("die_at"):
                    _die_at(request["die_at"])
                os.write(ready_end, b"r")

        signalled = False

        for job in request["jobs"]:
            run(Job(**job), ready)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def _die_at(call: int) -> None:
    """SIGKILL this process just before its `call`-th fsync, rename or rmtree from now on."""
    count = 0

    def counted(function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal count
            count += 1
            if count == call:
                os.kill(os.getpid(), signal.SIGKILL)
            return function(*args, **kwargs)

        return wrapper

    os.fsync = counted(os.fsync)
    os.rename = counted(os.rename)
    os.replace = counted(os.replace)
    shutil.rmtree = counted(shutil.rmtree)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
