"""Checkpoints with several processes: the main process writes, every process reads.

* Saving: each process's own state (RNG states, dataloader positions) is gathered to every
  process, gradients saved inside an accumulation window are averaged over the processes, and
  the main process alone writes the folder. Its outcome (the folder, or its error) is sent to
  all, so that every process returns the same folder or raises.
* Loading: the main process picks the folder; every process reads what it needs; if any process
  fails to read or check its part, every process raises, naming it (no process is left waiting
  in a collective for one that gave up).
* A checkpoint saved by N processes loads in M != N processes when no dataloader was in the
  middle of an epoch (see compat.py): the shared state is the same in every process, processes
  beyond N take the dataloader positions of process 0 and keep their own RNG states.

With one process each function here just runs its action.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from accel.checkpointing import layout
from accel.checkpointing.errors import CheckpointError, CheckpointNotPublishedError, CheckpointWriteError
from accel.checkpointing.rng import capture_rng
from accel.distributed import operations

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

T = TypeVar("T")

_REBUILT = {
    error.__name__: error
    for error in (
        CheckpointError, CheckpointNotPublishedError, CheckpointWriteError, ValueError, TypeError, FileExistsError,
        FileNotFoundError, NotADirectoryError, PermissionError, OSError,
    )
}
"""Errors raised on one process that are raised again, as the same type, on the others."""


_ALONE = contextvars.ContextVar("accel_checkpoint_alone", default=False)
"""True while the main process saves without the others (see participation.py): nothing here waits for them."""


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Within it, the functions below take no other process: the main process saves by itself."""
    token = _ALONE.set(True)
    try:
        yield
    finally:
        _ALONE.reset(token)


def together(accelerator: CheckpointHost) -> bool:
    """True when several processes take part in what checkpointing does now."""
    return accelerator.process_state.distributed and not _ALONE.get()


def per_process_objects(accelerator: CheckpointHost) -> dict[str, tuple[Any, str]]:
    """File name -> (value, what it is) of every process's RNG states and dataloader positions."""
    own = (capture_rng(), [loader.state_dict() for loader in accelerator.prepared.dataloaders])
    found: dict[str, tuple[Any, str]] = {}
    for rank, (rng, loaders) in _everyone(accelerator, own):
        whose = f" of process {rank}" if accelerator.process_state.distributed else ""
        found[layout.random_states_file(rank)] = (rng, f"the RNG states{whose}")
        found[layout.dataloaders_file(rank)] = (loaders, f"the dataloaders' positions{whose}")
    return found


def _everyone(accelerator: CheckpointHost, own: Any) -> list[tuple[int, Any]]:
    if not together(accelerator):
        return [(accelerator.process_state.process_index, own)]
    return list(enumerate(operations.gather_objects(own, accelerator.process_state)))


def averaged(gradients: dict[str, torch.Tensor], accelerator: CheckpointHost) -> dict[str, torch.Tensor]:
    """The processes' mean of gradients accumulated inside a window (without DDP's all-reduce yet).

    DDP averages the accumulated gradients at the window's last micro-batch, so resuming every
    process from the mean continues the window exactly: mean(a_r + b_r) = mean(a) + mean(b_r).
    """
    if gradients and _ALONE.get():
        raise ValueError(
            "save_state was called by the main process alone inside a gradient accumulation window: the other "
            "processes' accumulated gradients are part of the state and only they hold them. Save at a window boundary "
            "(when accelerator.sync_gradients is True), or call save_state from every process."
        )
    return operations.reduce(gradients, accelerator.process_state, "mean") if gradients else gradients


def own_files(rank: int, saved_processes: int, held: list[int] | None = None) -> tuple[str | None, str]:
    """(this process's RNG file, or None when the checkpoint holds none for it; its dataloader file,
    process 0's when it holds none of its own). `held`: the processes whose states the checkpoint
    holds, when not all `saved_processes` (a save by the main process alone holds [0])."""
    if rank < saved_processes and (held is None or rank in held):
        return layout.random_states_file(rank), layout.dataloaders_file(rank)
    return None, layout.dataloaders_file(0)


def warn_no_rng(rank: int, saved_processes: int, held: list[int] | None = None) -> None:
    if held is not None and rank < saved_processes:
        where = (f"was saved by the main process alone (save_state inside `if accelerator.is_main_process:`) and "
                 f"holds the RNG states and dataloader position of process(es) {held} only")
    else:
        where = f"holds the RNG states of {saved_processes} process(es), none for process {rank}"
    warnings.warn(
        f"load_state: the checkpoint {where}; process {rank} keeps its own RNG states (its random numbers, dropout "
        "say, do not continue a saved sequence) and takes process 0's dataloader position.",
        UserWarning,
        stacklevel=4,
    )


def on_main(accelerator: CheckpointHost, action: Callable[[], T], label: str) -> T:
    """Run `action` on the main process only; its result on every process, or its error raised on every one."""
    state = accelerator.process_state
    if not together(accelerator):
        return action()
    result: Any = None
    error: Exception | None = None
    if state.is_main_process:
        try:
            result = action()
        except Exception as exc:
            error = exc
    outcome = operations.broadcast_object(("ok", result) if error is None else _describe(error), state)
    if error is not None:
        raise error
    if outcome[0] != "ok":
        raise _rebuild(outcome, f"{label} failed on the main process")
    return outcome[1]


def agree(accelerator: CheckpointHost, action: Callable[[], T], label: str) -> T:
    """Run `action` on every process; if it raised on any, raise on every one (naming the first that failed)."""
    return _agreed(accelerator, action, label, share_results=False)[0]


def agree_all(accelerator: CheckpointHost, action: Callable[[], T], label: str) -> list[T]:
    """As `agree`, returning every process's result (small, picklable), in process order, on every
    process: one gather carries both the results and the errors.

    Example: `sizes = agree_all(accelerator, lambda: {"a.bin": 3}, "save_state")` -> [{"a.bin": 3}, ...]
    """
    return _agreed(accelerator, action, label, share_results=True)


def _agreed(accelerator: CheckpointHost, action: Callable[[], T], label: str, share_results: bool) -> list[T]:
    """`action` run on every process and one gather of the outcomes (the results too when `share_results`);
    this process's result first when they are not shared."""
    state = accelerator.process_state
    if not together(accelerator):
        return [action()]
    result: Any = None
    error: Exception | None = None
    try:
        result = action()
    except Exception as exc:
        error = exc
    sent = ("ok", result if share_results else None) if error is None else _describe(error)
    outcomes = operations.gather_objects(sent, state)
    if error is not None:
        raise error
    for rank, outcome in enumerate(outcomes):
        if outcome[0] != "ok":
            raise _rebuild(outcome, f"{label} failed on process {rank}")
    return [outcome[1] for outcome in outcomes] if share_results else [result]


def _describe(error: Exception) -> tuple[str, str, str]:
    return ("error", type(error).__name__, str(error))


def _rebuild(failure: tuple[Any, ...], where: str) -> Exception:
    _, kind, message = failure
    return _REBUILT.get(kind, RuntimeError)(f"{where} ({kind}): {message}")
