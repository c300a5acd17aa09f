"""A warm `python` for the suite's subprocesses: one interpreter imports torch once, and forks a copy per run.

Most of the suite's time is interpreters starting: `import torch` costs about 2 CPU-seconds per process on a
2-core machine, and the suite starts well over a thousand processes (training launches, their workers, the
real scripts under both frameworks, the command line). Each pytest worker therefore starts one *zygote*, an
interpreter that has imported torch and waits on a Unix socket, and points `sys.executable` at a small
*client* script. A test's `subprocess.run([sys.executable, ...])` (and any process that one starts the same
way: torch's launcher starts its workers with `sys.executable`) runs the client, which hands its command line,
environment, working folder and standard streams to the zygote; a forked copy becomes that process and runs
the script; the client forwards signals to it and ends with its exit status.

What the copy holds that a fresh interpreter would not: the modules `import torch` loads, and those torch
loads when a script builds its first optimizer (torch._dynamo, with sympy and parts of torch.distributed:
about 800 modules, a CPU-second), already loaded; and the zygote's hash seed. What it rebuilds: `sys.argv`,
`sys.path` (the script's folder, then PYTHONPATH), `sys.executable` (the client, so its own children come here
too), the environment, the working folder, the CPU affinity, the standard streams (buffered as Python would for them),
`-W`/PYTHONWARNINGS filters, a `sitecustomize` found on PYTHONPATH, torch's thread count from OMP_NUM_THREADS,
and the random seeds. It ends as Python does: the exit status printed when it is not a number, non-daemon
threads joined, atexit handlers, the script's `__main__` cleared (what it alone holds is finalized: an unclosed
file is flushed) unless a daemon thread still runs, a collection, the streams flushed; it leaves out tearing
down the modules, which touches every object and so copies each page of the zygote's memory on write (0.3
CPU-s a run): a module's object that needs finalizing at exit without an atexit handler is not finalized.

A run that sets `TESTS_ZYGOTE_PRELOAD=hf` (the real scripts do, and so do the processes they start) goes to
a second zygote that has also imported transformers, datasets, evaluate and diffusers (about 5 CPU-s a
process); it is started by the tests that use it, and a run must share the settings those imports read
(HF_*, TRANSFORMERS_*, ...) with it. `HF_HOME=.hf`, a relative path, keeps each run's cache in its own folder.

Anything else runs on the real interpreter (the client execs it): a command-line option other than `-u`,
`-B` and `-W`, `--multiprocessing-fork` (it needs inherited file descriptors), an interpreter setting in the
environment (PYTHONHASHSEED, PYTHONOPTIMIZE, ...) or a setting read when torch loads (TORCH_LOGS, LD_*, ...)
that differs from the zygote's, a closed standard stream, and every command when `TESTS_ZYGOTE=off`. A test
that must see a fresh interpreter (what importing accel loads, how an interpreter ends) uses `REAL_PYTHON`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

REAL_PYTHON = sys.executable  # imported by tests/conftest.py before it points sys.executable at the client
_ACCEPTED_FLAGS = {"-u", "-B"}
# Read by the interpreter at start or by torch's libraries when they load: a run that sets one differently
# from the zygote needs a fresh interpreter.
_FIXED_AT_START = ("PYTHONHASHSEED", "PYTHONOPTIMIZE", "PYTHONDEVMODE", "PYTHONTRACEMALLOC", "PYTHONMALLOC",
                   "PYTHONPROFILEIMPORTTIME", "PYTHONINSPECT", "PYTHONSAFEPATH", "PYTHONHOME", "PYTHONIOENCODING",
                   "PYTHONUTF8", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR",
                   "PYTHONVERBOSE", "PYTHONNODEBUGRANGES", "PYTHONINTMAXSTRDIGITS", "PYTHONWARNDEFAULTENCODING")
_FIXED_PREFIXES = ("TORCH_LOGS", "TORCH_CPP", "TORCH_SHOW", "TORCH_COMPILE", "TORCH_DISABLE", "TORCH_FORCE",
                   "TORCHDYNAMO", "TORCHINDUCTOR", "PYTORCH_JIT", "LD_", "OMP_", "KMP_", "GOMP_", "MKL_", "MALLOC_",
                   "LC_", "LANG")
KIND_VARIABLE = "TESTS_ZYGOTE_PRELOAD"


@dataclass(frozen=True)
class Kind:
    """A zygote's kind: what it imports after torch, the settings those imports read (a run must share them
    with it), and the values it gives them (a run asks for the kind with these, KIND_VARIABLE included)."""

    imports: str
    read_at_import: tuple[str, ...] = ()
    settings: dict[str, str] = field(default_factory=dict)


KINDS = {
    "": Kind("import torch._dynamo"),  # what torch loads when a script builds its first optimizer
    # The real scripts' libraries, offline; HF_HOME relative: each run's caches in its own working folder.
    "hf": Kind("import torch._dynamo, torch.utils.tensorboard, transformers, datasets, evaluate, diffusers\n"
               "from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer\n"
               "from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel",
               ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "DIFFUSERS_", "DATASETS_", "EVALUATE_", "TOKENIZERS_", "XDG_",
                "USE_TORCH", "USE_TF", "USE_JAX", "USE_FLAX"),
               {KIND_VARIABLE: "hf", "HF_HOME": ".hf", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}),
}


def command_form(args: list[str]) -> tuple[list[str], str, str, list[str]] | None:
    """`python ARGS` as (flags, mode, target, script arguments), mode one of "m", "c", "file"; None when
    the zygote cannot run it (then the real interpreter does)."""
    flags: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in _ACCEPTED_FLAGS:
            flags.append(arg)
        elif arg == "-W" and index + 1 < len(args):
            flags += [arg, args[index + 1]]
            index += 1
        elif arg.startswith("-W") and len(arg) > 2:
            flags += ["-W", arg[2:]]
        elif arg in ("-m", "-c") and index + 1 < len(args):
            return flags, arg[1], args[index + 1], args[index + 2:]
        elif arg.startswith("-") or not os.path.isfile(arg):
            return None
        else:
            return flags, "file", arg, args[index + 1:]
        index += 1
    return None


def _fixed(env: dict[str, str], kind: str) -> dict[str, str]:
    """The settings a run must share with a zygote of `kind` (OMP_NUM_THREADS is applied in the copy instead)."""
    prefixes = _FIXED_PREFIXES + KINDS[kind].read_at_import
    return {k: v for k, v in env.items() if (k in _FIXED_AT_START or k.startswith(prefixes)) and k != "OMP_NUM_THREADS"}


# ---------------------------------------------------------------------------------------------- the client


def client_main(socket_path: str) -> NoReturn:
    """The `python` a test runs: hand the run to the zygote, or become the real interpreter."""
    args = sys.argv[1:]
    form = command_form(args)
    if form is None or os.environ.get("TESTS_ZYGOTE") == "off" or "--multiprocessing-fork" in args:
        _exec_real(args)
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(socket_for(socket_path, os.environ.get(KIND_VARIABLE, "")))
        _die_with_parent()
        request = json.dumps({"args": args, "env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid(),
                              "ppid": os.getppid(), "cpus": sorted(os.sched_getaffinity(0))}).encode()
        socket.send_fds(conn, [struct.pack("!I", len(request)) + request], [0, 1, 2])
        replies = conn.makefile("r", encoding="ascii")  # a line each: the run's pid (or "no"), then its status
        reply = replies.readline().strip()
    except OSError:
        _exec_real(args)
    if reply == "no":
        conn.close()
        _exec_real(args)
    pid = int(reply)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(number, lambda sig, _frame: _forward(pid, sig))
    status = int(replies.readline().strip() or "-9")
    if status < 0:  # ended by a signal: end the same way, as the real interpreter's parent would see it
        if -status not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


def _die_with_parent() -> None:
    """Die (SIGKILL) with the process that started this one, unless it asked for another signal already.

    A script that ties its life to its parent's (accel's launch workers do, with prctl) does so in the copy,
    whose parent is a waiter of the zygote; the client, the launcher's real child, carries it instead.
    """
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    current = ctypes.c_int(0)
    if prctl(2, ctypes.byref(current), 0, 0, 0) == 0 and current.value == 0:  # PR_GET_PDEATHSIG
        parent = os.getppid()
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)


def _forward(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def _exec_real(args: list[str]) -> NoReturn:
    os.execv(REAL_PYTHON, [REAL_PYTHON, *args])


def socket_for(socket_path: str, kind: str) -> str:
    """Where the zygote of `kind` listens ("": the plain one)."""
    return f"{socket_path}-{kind}" if kind else socket_path


def write_client(path: str, socket_path: str) -> str:
    """Write the client script at `path` (executable, run by the real interpreter without site-packages)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(path, "w") as file:
        file.write(f"#!{REAL_PYTHON} -S\n"
                   f"import sys\nsys.path.insert(0, {here!r})\n"
                   f"from zygote import client_main\nclient_main({socket_path!r})\n")
    os.chmod(path, 0o755)
    return path


class Zygotes:
    """The zygotes one pytest process starts, each kind on its own socket, and the client that reaches them.

    Example:
        zygotes = Zygotes(); zygotes.start(); sys.executable = zygotes.client  # ...; zygotes.stop()
    """

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="accel-zygote-")
        self.folder = self._folder.name
        self._socket = os.path.join(self.folder, "socket")
        self.client = write_client(os.path.join(self.folder, "python"), self._socket)
        self._processes: dict[str, subprocess.Popen[str]] = {}

    def start(self, kind: str = "") -> None:
        """Start the zygote of `kind` (once) with the environment of this process, PYTHONPATH left out, and
        the kind's settings."""
        if kind in self._processes:
            return
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | KINDS[kind].settings
        log = os.path.join(self.folder, f"zygote-{kind or 'torch'}.log")  # what its imports print, kept out of the suite's
        with open(log, "w") as errors:
            process = subprocess.Popen([REAL_PYTHON, __file__, socket_for(self._socket, kind), self.client, kind],
                                       env=env, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=errors, cwd=self.folder)
        assert process.stdout is not None and process.stdout.readline().strip() == "ready", \
            f"the test zygote {kind!r} did not start:\n{open(log).read()[-4000:]}"
        self._processes[kind] = process

    def stop(self) -> None:
        """Stop every zygote and remove the folder."""
        for process in self._processes.values():
            process.kill()
            process.wait()
        self._processes.clear()
        self._folder.cleanup()


RUNNING: list[Zygotes] = []  # this pytest process's zygotes (tests/conftest.py), for fixtures that start a kind


# ---------------------------------------------------------------------------------------------- the zygote


def serve(socket_path: str, client_path: str, kind: str) -> None:
    """Import torch and what `kind` adds, then fork a waiter per connection until killed."""
    import gc
    import io  # noqa: F401  (what a run needs, loaded once here)
    import runpy  # noqa: F401
    import warnings  # noqa: F401

    started = dict(os.environ)
    import torch  # noqa: F401

    exec(KINDS[kind].imports, {})
    added = {k: v for k, v in os.environ.items() if k not in started}  # TORCHINDUCTOR_CACHE_DIR, set by dynamo
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, _reap)
    gc.collect()
    gc.freeze()  # the copies' collections skip what the zygote holds: fewer pages copied on write
    print("ready", flush=True)
    while True:
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _wait_for(conn, added, client_path, kind)  # returns only in the process that runs the script
            return
        conn.close()


def _reap(_number: int, _frame: Any) -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _wait_for(conn: socket.socket, added: dict[str, str], client_path: str, kind: str) -> None:
    """In a waiter: read one request; fork the process that runs it, report its pid and then its status.

    `added`: the variables torch's import set in the zygote's environment, which it sets in a fresh one too.
    """
    import select

    header, fds, _, _ = socket.recv_fds(conn, 4, 3)
    (size,) = struct.unpack("!I", header)
    data = b""
    while len(data) < size:
        data += conn.recv(size - len(data))
    request = json.loads(data)
    request["env"] = {**added, **request["env"]}
    own, zygotes = _fixed(request["env"], kind), _fixed(dict(os.environ), kind)
    if own != zygotes:
        _log({"fresh": sorted(set(own.items()) ^ set(zygotes.items())),
              "args": request["args"][:4], "test": request["env"].get("PYTEST_CURRENT_TEST")})
        conn.sendall(b"no\n")
        os._exit(0)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        conn.close()
        _become(request, fds, client_path)
        return
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    try:
        pidfd = os.pidfd_open(pid)  # Linux 5.3 and newer
    except (AttributeError, OSError):
        pidfd = None  # then a killed client leaves its run to end by itself
    watched: list[Any] = [conn, pidfd]
    while pidfd is not None and pidfd not in select.select(watched, [], [])[0]:
        if not conn.recv(64):  # the client is gone (killed): so is its run, and what that run started in its group
            _kill_group(pid)
            watched = [pidfd]
    _, status, usage = os.wait4(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    _log({"cpu": usage.ru_utime + usage.ru_stime, "wall": time.monotonic() - started, "args": request["args"][:4],
          "test": request["env"].get("PYTEST_CURRENT_TEST"), "kind": kind})
    try:
        conn.sendall(f"{code}\n".encode())
    except OSError:
        pass
    os._exit(0)


def _log(entry: dict[str, Any]) -> None:
    """With TESTS_ZYGOTE_LOG=FILE: a JSON line per run (its CPU time), or per run sent to a fresh interpreter."""
    if os.environ.get("TESTS_ZYGOTE_LOG"):
        with open(os.environ["TESTS_ZYGOTE_LOG"], "a") as log:
            log.write(json.dumps(entry) + "\n")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _become(request: dict[str, Any], fds: list[int], client_path: str) -> None:
    """In the forked copy: take the client's streams, environment and command line, and run it."""
    import io
    import random
    import tempfile
    import warnings

    os.setpgid(0, 0)
    os.sched_setaffinity(0, request["cpus"])  # the cores the client may run on (taskset), as a fresh one would
    _parent_is_the_clients(request["pid"], request["ppid"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    flags, mode, target, rest = command_form(request["args"])  # type: ignore[misc]
    unbuffered = "-u" in flags or bool(os.environ.get("PYTHONUNBUFFERED"))
    zygotes = {id(sys.stdout): "stdout", id(sys.stderr): "stderr"}
    _streams(io, unbuffered)
    _log_to_new_streams(zygotes)
    sys.dont_write_bytecode = "-B" in flags or bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.executable = client_path
    sys.orig_argv = [client_path, *request["args"]]
    options = [flags[i + 1] for i, flag in enumerate(flags) if flag == "-W"]
    options = [*[o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o], *options]
    sys.warnoptions[:] = options
    warnings._processoptions(options)  # type: ignore[attr-defined]
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    tempfile.tempdir = None
    tempfile._name_sequence = None  # type: ignore[attr-defined]
    if "OMP_NUM_THREADS" in os.environ:
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    first = {"m": os.getcwd(), "c": "", "file": os.path.dirname(os.path.abspath(target))}[mode]
    pythonpath = [os.path.abspath(p) if p else os.getcwd() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path[1:] if p not in pythonpath]
    sys.path[:] = [first, *pythonpath, *base]
    _sitecustomize(pythonpath)
    if os.environ.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()
    _end(_run(mode, target, rest))


def _parent_is_the_clients(client: int, parent: int) -> None:
    """`os.getppid()` answers the client's parent (the process that started this run) while the client lives
    (in this process: a process it forks, a subprocess's `preexec_fn` for one, has its own parent)."""
    real = os.getppid
    me = os.getpid()

    def getppid() -> int:
        if os.getpid() != me:
            return real()
        try:
            os.kill(client, 0)
        except ProcessLookupError:
            return real()
        return parent

    os.getppid = getppid


def _streams(io: Any, unbuffered: bool) -> None:
    """New sys.stdin/stdout/stderr over the received descriptors, buffered as Python buffers them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    sys.stdin = sys.__stdin__ = io.open(0, "r", closefd=False, encoding="utf-8")
    for name, fd in (("stdout", 1), ("stderr", 2)):
        tty = os.isatty(fd)
        stream = io.TextIOWrapper(io.open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False),
                                  encoding="utf-8", errors="backslashreplace" if fd == 2 else "strict",
                                  line_buffering=tty or fd == 2, write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _log_to_new_streams(zygotes: dict[int, str]) -> None:
    """Point the logging handlers that a preloaded library made on the zygote's stdout or stderr (transformers
    does, when it loads) at the run's, as they would be in a fresh interpreter."""
    import logging

    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and id(handler.stream) in zygotes:
                handler.stream = getattr(sys, zygotes[id(handler.stream)])


def _sitecustomize(pythonpath: list[str]) -> None:
    """Import a `sitecustomize` on PYTHONPATH, as a fresh interpreter would (it shadows the system's)."""
    for folder in pythonpath:
        path = os.path.join(folder, "sitecustomize.py")
        if os.path.isfile(path):
            sys.modules.pop("sitecustomize", None)
            import sitecustomize  # noqa: F401

            return


def _run(mode: str, target: str, rest: list[str]) -> Any:
    """Run the command as `__main__`; the exit status (an uncaught exception is printed, status 1)."""
    import importlib.machinery
    import runpy
    import types

    main = types.ModuleType("__main__")  # a fresh __main__: `-m` runs the module in __main__'s namespace too
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    try:
        if mode == "m":
            sys.argv = [target, *rest]
            runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]
        else:
            sys.argv = ["-c" if mode == "c" else target, *rest]
            if mode == "file":
                main.__file__, main.__loader__ = target, importlib.machinery.SourceFileLoader("__main__", target)
                with open(target, "rb") as file:
                    source = file.read()
            else:
                source = target.encode()
            exec(compile(source, target if mode == "file" else "<string>", "exec"), main.__dict__)
        return 0
    except SystemExit as ended:
        return ended.code
    except KeyboardInterrupt:
        _print_exception()
        _die_of_sigint()
    except BaseException:
        _print_exception()
        return 1


def _end(status: Any) -> NoReturn:
    """End as the interpreter ends after `sys.exit(status)`, but without tearing down what the zygote loaded."""
    import atexit
    import gc
    import threading

    if status is None:
        code = 0
    elif isinstance(status, int):
        code = status
    else:
        print(status, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  (the run's non-daemon threads, as Python joins them)
    atexit._run_exitfuncs()
    if threading.active_count() == 1:  # no daemon thread left to meet a cleared name (Python stops those first)
        _clear(sys.modules["__main__"])  # what the script alone holds is finalized: an unclosed file is flushed
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # as Python ends when it cannot flush
    os._exit(code & 0xFF)


def _clear(module: Any) -> None:
    """Clear a module's namespace as Python's teardown does: `_`-names first, then the rest, builtins kept."""
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        return
    for name in [name for name in namespace if name.startswith("_") and not name.startswith("__")]:
        namespace[name] = None
    for name in [name for name in namespace if name != "__builtins__"]:
        namespace[name] = None


def _print_exception(this_file: str = __file__) -> None:
    kind, value, trace = sys.exc_info()
    while trace is not None and trace.tb_frame.f_code.co_filename == this_file:
        trace = trace.tb_next
    if value is not None:
        value.__traceback__ = trace  # the hook prints the exception's own traceback
    sys.excepthook(kind, value, trace)  # type: ignore[arg-type]


def _die_of_sigint() -> NoReturn:
    """End as Python does after an uncaught KeyboardInterrupt: exit handlers, then killed by SIGINT."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.argv[3])
