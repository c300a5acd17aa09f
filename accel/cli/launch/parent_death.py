"""Tie a process's life to its parent's, so that killing `accel launch` (even with SIGKILL) leaves nothing running.

On Linux, prctl(PR_SET_PDEATHSIG) asks the kernel to send a signal to a process when the thread
that started it exits, however it exits. `accel launch` starts its child with it (SIGKILL for the
script, SIGTERM for the torchrun wrapper, which then stops its workers), and each worker sets it
for itself against the wrapper. Elsewhere this is a no-op: there, a killed launcher can leave
its children behind, as torchrun's does.

Torch-free and stdlib-only: the worker bootstrap calls it before the script imports anything.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(signum: int, parent: int) -> bool:
    """Ask for `signum` when this process's parent dies; if the parent `parent` is already gone, take it now.

    Returns False where the platform cannot do this. Call it in the child, first thing.
    """
    prctl = _prctl()
    if prctl is None or prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent died before the request was in place
        os.kill(os.getpid(), signum)
    return True


def child_setup(signum: int) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen that makes the child receive `signum` when this process dies.

    Everything is looked up before the fork, so that the child only makes one system call (this
    process has no other threads when `accel launch` starts its child). None where unsupported.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return setup
