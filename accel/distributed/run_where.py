"""The `on_*_process` decorators' one rule: run the function on the chosen process, elsewhere do nothing.

`PartialState.on_main_process`, `on_process(process_index=...)` and the others (and the Accelerator's,
which are the same) choose the process; `run_where` turns that choice into the function or a stand-in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def run_where(function: Callable[..., Any] | None, here: bool) -> Any:
    """`function` when `here`, else a stand-in that does nothing and returns None; with no
    function, a decorator that does the same (so both `@state.on_x` and `@state.on_x()` work).

    Args:
        function: The decorated function, or None when the decorator is called with arguments.
        here: Whether this process is the one that runs it.
    """
    if function is None:
        return functools.partial(run_where, here=here)
    if here:
        return function

    @functools.wraps(function)
    def skipped(*args: Any, **kwargs: Any) -> None:
        return None

    return skipped


def chosen_index(argument: str, value: Any) -> int:
    """`value` as the index of the process a decorator names, or a ValueError naming `argument`.

    Args:
        argument: The decorator's keyword (`process_index`, `local_process_index`), for the message.
        value: What the script gave.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{argument}={value!r} is not accepted: give the index (an int >= 0) of the process to run on."
        )
    return value
