"""GeneralTracker: the base class of every experiment tracker, built-in or written by a user.

Same names, signatures and meaning as Accelerate's `accelerate.tracking.GeneralTracker`, so a
custom tracker written for Accelerate works here unchanged.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

_Method = TypeVar("_Method", bound=Callable[..., Any])


def is_main_process() -> bool:
    """True on the process of global rank 0 (and in a single process).

    Read from the process group when one exists, else from torchrun's `RANK`, so that a tracker
    works without an Accelerator (as Accelerate's do).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return int(os.environ.get("RANK", "0")) == 0


def on_main_process(method: _Method) -> _Method:
    """Run a tracker method on the main process only when the tracker's `main_process_only` is true.

    Checked at each call (not at decoration), as in Accelerate, so a subclass may change the flag.
    Elsewhere the call does nothing and returns None.
    """

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", False) and not is_main_process():
            return None
        return method(self, *args, **kwargs)

    return cast(_Method, run)  # functools.wraps keeps method's signature


class GeneralTracker:
    """Base class for experiment trackers (Accelerate's interface).

    A subclass defines:
    - `name` (str): what `log_with=` and `get_tracker()` call it, e.g. "tensorboard";
    - `requires_logging_directory` (bool): whether `init_trackers` passes the logging folder
      as the second positional argument of the constructor;
    - `tracker` (property): the library's own object (a SummaryWriter, a wandb run, ...).
    It may set `main_process_only` (default True): whether its methods run on the main process
    only. `start()` creates the library's run (called by `Accelerator.init_trackers`), so that
    constructing a tracker is cheap and touches nothing; older trackers that do that work in
    `__init__` keep working, since the default `start()` does nothing.
    """

    main_process_only: bool = True

    if TYPE_CHECKING:  # what a subclass defines (declared for the type checker only: __init__ checks they exist)
        name: ClassVar[str]
        requires_logging_directory: ClassVar[bool]

        @property
        def tracker(self) -> Any: ...

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        required = ("name", "requires_logging_directory")
        missing = [f"`{attribute}`" for attribute in required if not hasattr(self, attribute)]
        if "tracker" not in dir(self):  # a property: hasattr would evaluate it before start()
            missing.append("`tracker`")
        if missing:
            raise NotImplementedError(
                f"The tracker class {type(self).__name__} is missing these required attributes: {', '.join(missing)}. "
                "Define them in the class body (see accel.tracking.GeneralTracker)."
            )

    def start(self) -> None:
        """Create the run in the tracking library (called once by `init_trackers`)."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record `values` as the run's hyperparameters."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record `values` (name -> number, string, ...) at training step `step`."""

    def finish(self) -> None:
        """Close the run and write out what is pending (called by `end_training`)."""
