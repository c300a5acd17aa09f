"""`get_logger`: Accelerate's process-aware logger (`from accelerate.logging import get_logger`).

A record is emitted on the main process only, unless the call says `main_process_only=False`
(then on every process, or, with `in_order=True`, on every process one after another).
Each message starts with `[RANK <process index>] `, as Accelerate's does (log parsers and
readers of multi-process logs rely on it).
The process is read when the record is logged, so a logger may be created at import time,
before any Accelerator or process group exists.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

_LEVEL_VARIABLE = "ACCEL_LOG_LEVEL"


class MultiProcessAdapter(logging.LoggerAdapter):
    """A LoggerAdapter that knows which process it runs in (Accelerate's class of the same name)."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        kwargs.setdefault("stacklevel", 2)
        if not self.isEnabledFor(level):
            return
        from accel.distributed.partial_state import PartialState

        state = PartialState()
        if main_process_only or not in_order:
            if state.is_main_process or not main_process_only:
                msg, options = self.process(msg, kwargs)
                self.logger.log(level, msg, *args, **options)
            return
        for index in range(state.num_processes):
            if index == state.process_index:
                msg, options = self.process(msg, kwargs)
                self.logger.log(level, msg, *args, **options)
            state.wait_for_everyone()

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        """The message with its process named in front: `[RANK 0] message`."""
        from accel.distributed.partial_state import PartialState

        return f"[RANK {PartialState().process_index}] {msg}", kwargs


def get_logger(name: str, log_level: str | int | None = None) -> MultiProcessAdapter:
    """The logger `name`, wrapped so that records go out on the main process only by default.

    `log_level` (or `$ACCEL_LOG_LEVEL`) sets the logger's level when given, as in Accelerate.
    """
    level = log_level if log_level is not None else os.environ.get(_LEVEL_VARIABLE)
    logger = logging.getLogger(name)
    if level is not None:
        logger.setLevel(level.upper() if isinstance(level, str) else level)
        logger.root.setLevel(level.upper() if isinstance(level, str) else level)
    return MultiProcessAdapter(logger, {})
