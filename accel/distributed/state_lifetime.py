"""Which process-state objects are alive, and what Accelerate's `_reset_state()` does to them.

Accelerate keeps one shared state per process and `_reset_state()` clears it; accel keeps no shared
state (partial_state.py), so a reset instead empties every live state object of its kind, and an
object kept from before a reset reads the values of the next state of its kind created after it
(as every handle on Accelerate's shared state does). `is_initialized()` answers as Accelerate's
does: whether an AcceleratorState is alive and not reset (diffusers reads it).

A state's kind is its class attribute `kind`: "partial" (PartialState) or "accelerator"
(AcceleratorState, which is a PartialState too).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # partial_state.py imports this module
    from accel.distributed.partial_state import PartialState

_LIVE: weakref.WeakSet[PartialState] = weakref.WeakSet()
"""Every filled PartialState and AcceleratorState not yet collected: what a reset empties."""
_SERIAL = itertools.count(1)
"""Orders the creation of states and resets: an emptied state rejoins a state created after its reset."""
_NEWEST: dict[str, PartialState] = {}
"""The newest state ("partial": of either kind, "accelerator": AcceleratorState), kept as Accelerate keeps
its shared state after the Accelerator that filled it is gone (`is_initialized()`, rejoining)."""


def register(state: PartialState) -> None:
    """Count `state` (filled: it holds `_process`) among the live states, the newest of its kind."""
    state.__dict__["_serial"] = next(_SERIAL)
    _LIVE.add(state)
    _NEWEST["partial"] = state
    if state.kind == "accelerator":
        _NEWEST["accelerator"] = state


def empty(chosen: Callable[[PartialState], bool]) -> None:
    """Remove the attributes of every live state `chosen` accepts (what Accelerate's `_shared_state.clear()` does).

    Args:
        chosen: Says, for a live state, whether this reset empties it.
    """
    reset_at = next(_SERIAL)
    for state in list(_LIVE):
        if chosen(state):
            state.__dict__.clear()
            state.__dict__["_reset_at"] = reset_at
            _LIVE.discard(state)


def rejoin(state: PartialState) -> bool:
    """Refill an emptied `state` from the newest state of its kind created after its reset, if any, and
    say whether it did: an object kept from before `_reset_state()` then reads the new run's values.

    Args:
        state: A PartialState or AcceleratorState, emptied or not.
    """
    reset_at = state.__dict__.get("_reset_at")
    if reset_at is None:
        return False
    source = _NEWEST.get(state.kind)
    if source is None or "_process" not in source.__dict__ or source.__dict__["_serial"] < reset_at:
        return False
    state.__dict__.pop("_reset_at")
    state.__dict__.update(source.__dict__)
    _LIVE.add(state)
    return True


def is_initialized() -> bool:
    """True once an Accelerator (or an AcceleratorState built directly) was created, until
    `AcceleratorState._reset_state()` (Accelerate's `accelerate.state.is_initialized()`).

    Example:
        >>> from accel.state import is_initialized
        >>> is_initialized()  # doctest: +SKIP
        False
    """
    newest = _NEWEST.get("accelerator")
    return newest is not None and "_process" in newest.__dict__
