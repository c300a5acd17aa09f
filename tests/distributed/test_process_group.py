"""The process group's collective timeout, as the waits and errors that name it read it, follows the
group that runs now: accel's own group (with its timeout), a group the script made after destroying
accel's, a new accel group after that. One process, real gloo groups of one."""

from __future__ import annotations

import datetime
import socket
import sys
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from accel.distributed.process_group import Layout, join_process_group, leave_process_group, timeout_in_force
from accel.kwargs_handlers import InitProcessGroupKwargs

DEFAULT = InitProcessGroupKwargs().timeout.total_seconds()


@pytest.fixture
def no_group_left() -> Iterator[None]:
    yield
    leave_process_group()
    if dist.is_initialized():
        dist.destroy_process_group()


def accel_group(seconds: float) -> None:
    """The group accel makes for an Accelerator, with InitProcessGroupKwargs(timeout=seconds), on a free port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = InitProcessGroupKwargs(init_method=f"tcp://127.0.0.1:{port}", timeout=datetime.timedelta(seconds=seconds))
    join_process_group(Layout(), torch.device("cpu"), options)


def test_the_timeout_in_force_is_the_running_groups(no_group_left: None) -> None:
    assert timeout_in_force() == DEFAULT  # no group yet
    accel_group(7)
    assert timeout_in_force() == 7
    dist.destroy_process_group()  # the script ends accel's group itself ...
    assert timeout_in_force() == DEFAULT
    own = datetime.timedelta(seconds=11)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=own)  # ... makes its own
    assert timeout_in_force() == 11  # its own, not accel's former group's 7 s
    dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # torch's default: 30 minutes
    assert timeout_in_force() == DEFAULT
    dist.destroy_process_group()
    accel_group(9)
    assert timeout_in_force() == 9
    leave_process_group()
    assert timeout_in_force() == DEFAULT and not dist.is_initialized()


def test_a_group_the_script_destroyed_is_forgotten_with_its_excepthook(no_group_left: None) -> None:
    hook = sys.excepthook
    accel_group(7)
    assert sys.excepthook is not hook  # accel's group notes a failing exit
    dist.destroy_process_group()  # the script ends accel's group itself
    accel_group(9)  # the next Accelerator's
    leave_process_group()
    assert sys.excepthook is hook  # not still wrapped for the first group
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    leave_process_group()  # at exit, say: the script's own group is not accel's to destroy
    assert dist.is_initialized() and timeout_in_force() == DEFAULT
