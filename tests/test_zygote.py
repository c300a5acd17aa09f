"""The suite's warm `python` (tests/zygote.py) behaves as the real interpreter where a test can see it.

Each check runs the same command on the client (`sys.executable` in the suite) and on the real interpreter
and compares what a test would read: output, exit status, tracebacks, signals, environment, paths.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zygote
from zygote import REAL_PYTHON

pytestmark = pytest.mark.skipif(sys.executable == REAL_PYTHON, reason="the suite runs without the zygote (TESTS_ZYGOTE=off)")

REPORT = """\
import json, os, random, sys
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "seen": os.environ.get("SEEN"),
                  "dont_write_bytecode": sys.dont_write_bytecode, "main": __name__, "file": globals().get("__file__"),
                  "stdin": sys.stdin.read(), "random": random.random()}))
sys.exit(3)
"""


def both(args: list[str], **kwargs: object) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same command on the warm client and on the real interpreter."""
    runs = [subprocess.run([python, *args], capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload]
            for python in (sys.executable, REAL_PYTHON)]
    return runs[0], runs[1]


def test_a_run_is_a_forked_copy_that_already_holds_torch() -> None:
    warm, real = both(["-c", "import sys; print('torch._dynamo' in sys.modules)"])
    assert (warm.stdout, real.stdout) == ("True\n", "False\n")


@pytest.mark.parametrize("form", ["file", "-c", "-m"])
def test_argv_path_cwd_environment_stdin_and_status_are_the_real_interpreters(tmp_path: Path, form: str) -> None:
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    command = {"file": [str(script)], "-c": ["-c", REPORT], "-m": ["-m", "report"]}[form]
    env = {**os.environ, "SEEN": "yes", "PYTHONPATH": str(tmp_path)}
    warm, real = both(["-B", *command, "a", "--b"], cwd=tmp_path, env=env, input="from stdin")
    assert warm.returncode == real.returncode == 3, warm.stderr
    ours, theirs = json.loads(warm.stdout), json.loads(real.stdout)
    assert ours.pop("random") != theirs.pop("random")  # each run draws its own seed
    assert ours == theirs
    assert theirs["stdin"] == "from stdin" and theirs["argv"][1:] == ["a", "--b"]


def test_an_uncaught_exception_prints_the_same_traceback(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("def inner():\n    raise ValueError('no')\ninner()\n")
    warm, real = both([str(script)])
    assert warm.returncode == real.returncode == 1
    assert warm.stderr == real.stderr
    assert "zygote" not in warm.stderr


ENDING = """\
import atexit, sys, threading, time
log = open(sys.argv[1], "w")
log.write("written, never closed")
class Finalized:
    def __del__(self):
        print("finalized")
kept = Finalized()
atexit.register(lambda: print("atexit"))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
sys.exit(sys.argv[2] if sys.argv[2] != "int" else 4)
"""


@pytest.mark.parametrize("status", ["int", "a message"])
def test_it_ends_as_the_interpreter_ends(tmp_path: Path, status: str) -> None:
    script = tmp_path / "ends.py"
    script.write_text(ENDING)
    runs = [subprocess.run([python, str(script), str(tmp_path / f"log-{i}"), status], capture_output=True, text=True,
                           timeout=120) for i, python in enumerate((sys.executable, REAL_PYTHON))]
    assert [run.returncode for run in runs] == [4 if status == "int" else 1] * 2
    assert runs[0].stdout == runs[1].stdout == "thread done\natexit\nfinalized\n"
    assert runs[0].stderr == runs[1].stderr == ("" if status == "int" else "a message\n")
    assert (tmp_path / "log-0").read_text() == (tmp_path / "log-1").read_text() == "written, never closed"


def test_a_run_asking_for_the_libraries_gets_them_with_its_own_streams_and_caches(tmp_path: Path) -> None:
    for zygotes in zygote.RUNNING:
        zygotes.start("hf")
    probe = ("import logging, os, sys, transformers\n"
             "handlers = logging.getLogger('transformers').handlers\n"
             "print(bool(handlers) and all(h.stream is sys.stderr for h in handlers), 'diffusers' in sys.modules)\n"
             "from huggingface_hub import constants\nprint(os.path.abspath(constants.HF_HUB_CACHE))\n")
    env = {**os.environ, **zygote.KINDS["hf"].settings}
    warm, real = both(["-c", probe], env=env, cwd=tmp_path)
    assert warm.stdout.splitlines()[0] == "True True" and real.stdout.splitlines()[0] == "True False", warm.stderr
    assert warm.stdout.splitlines()[1] == real.stdout.splitlines()[1] == str(tmp_path / ".hf" / "hub")


def test_a_signal_reaches_the_run_and_its_status_is_the_signal(tmp_path: Path) -> None:
    codes = []
    for python in (sys.executable, REAL_PYTHON):
        ready = tmp_path / f"ready-{len(codes)}"
        process = subprocess.Popen([python, "-c", f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"])
        _wait_for(ready)
        process.send_signal(signal.SIGTERM)
        codes.append(process.wait(timeout=30))
    assert codes == [-signal.SIGTERM, -signal.SIGTERM]


def test_killing_the_client_kills_its_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    process = subprocess.Popen([sys.executable, "-c", f"import os, pathlib, time; "
                                f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(60)"])
    _wait_for(pid_file)
    run = int(pid_file.read_text())
    assert run != process.pid  # the run is the zygote's copy, not the client
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _alive(run) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(run)


def test_the_run_sees_the_process_that_started_it_as_its_parent() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getppid())"], capture_output=True, text=True,
                          timeout=60)
    assert int(done.stdout) == os.getpid()


def test_its_own_children_come_from_the_zygote_too() -> None:
    child = "import sys; print('torch._dynamo' in sys.modules)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60)
    assert done.stdout == "True\n", done.stderr


def test_settings_read_at_start_are_the_runs_own(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.CUSTOMIZED = True\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "error::UserWarning"}
    probe = ("import builtins, torch, warnings\nprint(getattr(builtins, 'CUSTOMIZED', False), torch.get_num_threads())\n"
             "try:\n    warnings.warn('x')\nexcept UserWarning:\n    print('raised')\n")
    warm, real = both(["-c", probe], env=env)
    assert warm.stdout == real.stdout == "True 1\nraised\n", warm.stderr


def test_the_run_keeps_the_cores_it_was_pinned_to() -> None:
    warm, real = both(["-c", "import os; print(sorted(os.sched_getaffinity(0)))"])
    pinned = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                            capture_output=True, text=True, timeout=60)
    assert warm.stdout == real.stdout and pinned.stdout == "[0]\n", pinned.stderr


def test_what_it_cannot_copy_runs_on_the_real_interpreter() -> None:
    isolated = subprocess.run([sys.executable, "-I", "-c", "import sys; print('torch' in sys.modules)"],
                              capture_output=True, text=True, timeout=60)
    seeded = subprocess.run([sys.executable, "-c", "import sys; print(sys.flags.hash_randomization)"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert (isolated.stdout, seeded.stdout) == ("False\n", "0\n")


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists() or not path.read_text() and path.name == "pid":
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
