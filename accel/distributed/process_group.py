"""The torch.distributed process group: joined once per process, reused, left by end_training.

`accel launch --num_processes N` (torch.distributed.run) starts each process with RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. The first
Accelerator of a process with WORLD_SIZE > 1 joins the group; later ones reuse it. The group is
the only state accel keeps per process: everything else lives in each Accelerator.

accel makes its own rendezvous store (rather than letting init_process_group make it) for two
reasons: its errors can name the address, the port and the flag to change; and each group it
creates gets keys of its own in the store, so that a group can be created again after
`end_training()` destroyed the previous one (torch's default keys would collide).
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import itertools
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from accel.kwargs_handlers import InitProcessGroupKwargs
from accel.settings import COLLECTIVE_TIMEOUT

_DEFAULT_BACKENDS = {"cuda": "nccl", "xpu": "xccl"}
"""The backend for each device type; any other (the CPU) uses gloo."""

_generations = itertools.count()
"""Numbers the groups accel creates in this process, for their store keys. Every process creates
and destroys groups in the same order, so they agree on the number."""
ROUND_VARIABLE = "_ACCEL_LAUNCH_ROUND"
"""A name for the launch's current rendezvous round, the same in every worker of every machine and new in each
round: set by `accel launch`'s agent (cli/launch/rank_grace.py), read where the group's store keys are made."""

_created: list[tuple[Any, Any, float] | None] = [None]
"""(the group accel created, the excepthook before it, its collective timeout in seconds), while it
exists: end_training destroys that group only, never one the script created itself."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """This process's place as torchrun describes it."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1


def read_layout(environ: Mapping[str, str]) -> Layout:
    """The layout from torchrun's variables; one process when WORLD_SIZE is unset or 1."""
    world_size = _int_variable(environ, "WORLD_SIZE", "1", minimum=1)
    if world_size == 1:
        return Layout()
    if "RANK" not in environ:
        raise ValueError(
            f"WORLD_SIZE={world_size} is set but RANK is not, so this process cannot know its place among the "
            f"{world_size}. Start the script with `accel launch --num_processes {world_size} script.py` (or "
            "torchrun), which sets both, or unset WORLD_SIZE to run one process."
        )
    rank = _int_variable(environ, "RANK", "0", minimum=0, maximum=world_size - 1)
    local_world_size = _int_variable(environ, "LOCAL_WORLD_SIZE", str(world_size), minimum=1, maximum=world_size)
    local_rank = _int_variable(environ, "LOCAL_RANK", str(rank), minimum=0, maximum=local_world_size - 1)
    return Layout(rank, local_rank, world_size, local_world_size)


def _int_variable(environ: Mapping[str, str], name: str, default: str, *, minimum: int, maximum: int | None = None) -> int:
    text = environ.get(name, default)
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bound = f"an int from {minimum} to {maximum}" if maximum is not None else f"an int >= {minimum}"
        raise ValueError(
            f"{name}={text!r} is not accepted: torchrun sets it to {bound}. Start the script with accel launch "
            "(or torchrun) rather than setting it by hand."
        )
    return value


def default_backend(device: torch.device) -> str:
    """nccl for CUDA, xccl for XPU, gloo for the CPU."""
    return _DEFAULT_BACKENDS.get(device.type, "gloo")


def join_process_group(layout: Layout, device: torch.device, options: InitProcessGroupKwargs) -> str:
    """Initialise the process group for `layout` (or reuse the one that exists, unless accel's was
    released by end_training: that one is destroyed and a new one made, with this Accelerator's options); its backend."""
    if _released[0] or not dist.is_initialized():
        leave_process_group()  # destroys accel's released group; forgets one the script destroyed
    if dist.is_initialized():
        return _reuse(layout, options)
    backend = options.backend or default_backend(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    options = dataclasses.replace(options, timeout=collective_timeout(options, os.environ))
    store = _rendezvous(layout, options)
    hook = sys.excepthook  # init_process_group prefixes tracebacks with the rank; destroy puts it back
    dist.init_process_group(
        backend, store=store, rank=layout.rank, world_size=layout.world_size, timeout=options.timeout
    )
    _created[0] = (dist.group.WORLD, hook, options.timeout.total_seconds())
    sys.excepthook = _Failure(sys.excepthook)
    if not _exit_hook:
        _exit_hook.append(atexit.register(_leave_at_exit))
    return backend


_DEFAULT_TIMEOUT = InitProcessGroupKwargs().timeout.total_seconds()


def timeout_in_force() -> float:
    """The running process group's collective timeout in seconds, for the waits and errors that name it: the one
    accel gave the group it made, else the one torch keeps for a group the script made, else (no group, or torch
    keeps it elsewhere) InitProcessGroupKwargs' default, 30 minutes.

    Looked up from the running group at each call rather than kept when a group is made: a script may
    destroy accel's group and make its own, and a value kept from the old group would then hold for
    the new one. Example: `deadline = time.monotonic() + timeout_in_force()`.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return _DEFAULT_TIMEOUT
    created = _created[0]
    if created is not None and dist.group.WORLD is created[0]:
        return created[2]
    return _kept_timeout(dist.group.WORLD) or _DEFAULT_TIMEOUT


def _kept_timeout(group: Any) -> float | None:
    """The timeout torch keeps for `group`, in seconds: on its CPU or CUDA backend's options (`options._timeout`,
    private in torch 2.x, so looked for defensively); None where it is not found."""
    for device in ("cpu", "cuda"):
        try:
            return float(group._get_backend(torch.device(device)).options._timeout.total_seconds())
        except (AttributeError, RuntimeError, ValueError, TypeError):
            continue
    return None


def collective_timeout(options: InitProcessGroupKwargs, environ: Mapping[str, str]) -> datetime.timedelta:
    """How long a collective waits: InitProcessGroupKwargs(timeout=) when given, else ACCEL_COLLECTIVE_TIMEOUT
    (`accel launch --collective_timeout`, config key collective_timeout), else the handler's default (30 minutes).

    A bad ACCEL_COLLECTIVE_TIMEOUT raises ValueError naming the variable, before any process waits.
    """
    if "timeout" in options.explicit_fields:
        return options.timeout
    seconds = COLLECTIVE_TIMEOUT.from_env(environ)
    return options.timeout if seconds is None else datetime.timedelta(seconds=seconds)


class _Failure:
    """sys.excepthook while accel's group exists: notes that the script is ending on an error."""

    happened = False

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def __call__(self, *args: Any) -> None:
        _Failure.happened = True
        self.hook(*args)


_exit_hook: list[Any] = []


def _leave_at_exit() -> None:
    """At interpreter exit, while Python still runs: destroy the group accel created, if it is still there.

    A gloo worker thread releases each finished collective a moment after the main thread has
    its result, and needs the GIL for that; if the interpreter's teardown starts in between, the
    process aborts ("terminate called without an active exception", pytorch#190489) and a run
    that had finished reports a failure. Destroying the group and then releasing the GIL briefly
    lets those threads finish first. After an error the group is left alone: destroying it could
    wait for peers that are still inside a collective.
    """
    if not _Failure.happened:
        leave_process_group()
    time.sleep(_SETTLE_SECONDS)


_SETTLE_SECONDS = 0.05
"""How long the main thread gives up the GIL at exit (see _leave_at_exit)."""


def release_process_group() -> None:
    """The Accelerator that made accel's group is done with it (end_training). The group stays usable, so
    that a collective after end_training still runs (transformers' examples wait_for_everyone() and save
    then; Accelerate destroys the group there and such a script fails); the next Accelerator in this
    process replaces it, and the interpreter's exit destroys it."""
    if _created[0] is not None:
        _released[0] = True


_released = [False]
"""Whether end_training released accel's group (see release_process_group)."""


def leave_process_group() -> None:
    """Destroy the process group if accel created it (a group the script made itself stays).

    accel's group is forgotten (and the excepthook it put in taken out) even when the script has
    destroyed it itself, and may run a group of its own now: nothing of that old group must be
    taken for the new one's (the next group accel makes would otherwise wrap the hook twice).
    """
    _released[0] = False
    created = _created[0]
    if created is None:
        return
    _created[0] = None
    running = dist.is_initialized() and dist.group.WORLD is created[0]
    if running:
        dist.destroy_process_group()
    if isinstance(sys.excepthook, _Failure):  # not if the script has put in its own since
        sys.excepthook = created[1]
    if running:
        time.sleep(_SETTLE_SECONDS)  # see _leave_at_exit


def _reuse(layout: Layout, options: InitProcessGroupKwargs) -> str:
    """The running group's backend, after checking it matches the layout and the options."""
    backend = str(dist.get_backend())
    if (dist.get_rank(), dist.get_world_size()) != (layout.rank, layout.world_size):
        raise RuntimeError(
            f"a process group already runs here as rank {dist.get_rank()} of {dist.get_world_size()}, but the "
            f"environment says RANK={layout.rank} of WORLD_SIZE={layout.world_size}. Create the group from the same "
            "environment, or let the Accelerator create it."
        )
    if options.backend is not None and options.backend not in backend.split(","):
        raise ValueError(
            f"InitProcessGroupKwargs(backend={options.backend!r}) cannot apply: a process group with backend "
            f"{backend!r} already runs in this process. Drop the backend option, or call end_training() on the "
            "Accelerator that created the group before creating this one."
        )
    return backend


def _rendezvous(layout: Layout, options: InitProcessGroupKwargs) -> dist.Store:
    """The store the processes meet in, with keys of its own for this group; clear errors."""
    url = options.init_method or "env://"
    seconds = options.timeout.total_seconds()
    try:
        store, _, _ = next(dist.rendezvous(url, rank=layout.rank, world_size=layout.world_size, timeout=options.timeout))
    except (RuntimeError, ValueError, TimeoutError, OSError) as error:
        raise _rendezvous_error(url, layout, seconds, error) from error
    store.set_timeout(options.timeout)
    # A restarted process (accel launch --max_restarts) may meet in the same store as the attempt before it:
    # without the attempt in the keys it would read that attempt's addresses and wait for processes long gone.
    # The attempt is the launch's rendezvous round, which every machine shares; torchrun's restart count is
    # each machine's own (a machine that restarts because another rejoined does not count it), so it is only
    # the fallback, for scripts started by torchrun itself.
    attempt = os.environ.get(ROUND_VARIABLE) or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"accel_pg_{attempt}_{next(_generations)}", store)


def _rendezvous_error(url: str, layout: Layout, seconds: float, error: BaseException) -> RuntimeError:
    """Say where the processes tried to meet, why it failed, and what to change."""
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}" if url == "env://" else url
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "EADDRINUSE" in str(error) or "address already in use" in str(error).lower():
        return RuntimeError(
            f"process {layout.rank} could not open the rendezvous port {where}: it is already in use on this "
            "machine (another training, or a previous one still ending). Choose another port with "
            "`accel launch --main_process_port PORT` (MASTER_PORT), or leave it out on one machine to get a free one."
        )
    return RuntimeError(
        f"process {layout.rank} of {layout.world_size} could not meet the others at {where} within {seconds:g} s "
        f"({reason}). Check that the main machine (machine_rank 0) is running, that --main_process_ip "
        "(MASTER_ADDR) is its address as seen from this machine, and that --main_process_port (MASTER_PORT) is "
        "open; InitProcessGroupKwargs(timeout=...) sets how long to wait."
    )


def check_same_setup(setup: Mapping[str, str]) -> None:
    """Raise on every process when the processes' configurations differ, naming the ranks and fields.

    One small all-gather at start: processes that train in different precisions (say) would
    otherwise hang or average gradients of different meaning.
    """
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, dict(setup))
    main = gathered[0]
    differences = [
        f"rank {other} has {key}={value} where rank 0 has {main.get(key)}"
        for other, theirs in enumerate(gathered)
        for key, value in theirs.items()
        if main.get(key) != value
    ]
    if differences:
        raise ValueError(
            "the processes of this run are configured differently: " + "; ".join(differences) + ". Every process "
            "must create its Accelerator with the same settings; `accel launch` gives all of them the same "
            "environment, so look for code or environment variables that depend on the rank."
        )


def setup_fingerprint(**values: Any) -> dict[str, str]:
    """The configuration values to compare across processes, as repr() text (plus the versions)."""
    from accel._version import __version__

    versions = {"accel": __version__, "torch": torch.__version__}
    return {k: repr(v) for k, v in {**versions, **values}.items()}

