"""`notebook_launcher` and `debug_launcher`: run a function in several processes from Python
(a notebook, a test), as Accelerate's functions of the same names do.

Each process gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, ...),
so an Accelerator or PartialState created inside the function joins the process group as under
`accel launch`. Processes are forked: the function may be defined in the notebook itself.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

from accel.utils.environment import patch_environment


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str | int = "29500",
    master_addr: str = "127.0.0.1",
    **unsupported: Any,
) -> None:
    """Run `function(*args)` in `num_processes` processes on this machine (one: in this process).

    `mixed_precision` reaches the Accelerators created inside as ACCEL_MIXED_PRECISION. Options of
    Accelerate's that need several machines or TPUs (node_rank, num_nodes, rdzv_*) are refused.
    """
    given = {k: v for k, v in unsupported.items() if v not in (None, 0, 1, "static", "")}
    if given:
        raise ValueError(
            f"notebook_launcher({', '.join(f'{k}={v!r}' for k, v in given.items())}): accel launches on this "
            "machine only from a notebook; for several machines use `accel launch` with --num_machines."
        )
    count = 1 if num_processes is None else int(num_processes)
    if count < 1:
        raise ValueError(f"notebook_launcher(num_processes={num_processes!r}): give an int >= 1.")
    with patch_environment(accel_mixed_precision=mixed_precision):
        if count == 1:
            function(*args)
            return
        _run_processes(function, args, count, master_addr, int(use_port), cpu=False)


def debug_launcher(function: Callable[..., Any], args: tuple[Any, ...] = (), num_processes: int = 2) -> None:
    """Run `function(*args)` in `num_processes` CPU processes (gloo), to debug multi-process code anywhere."""
    if int(num_processes) < 1:
        raise ValueError(f"debug_launcher(num_processes={num_processes!r}): give an int >= 1.")
    _run_processes(function, args, int(num_processes), "127.0.0.1", _free_port(), cpu=True)


def _run_processes(
    function: Callable[..., Any], args: tuple[Any, ...], count: int, address: str, port: int, cpu: bool
) -> None:
    """Fork `count` processes running `function(*args)`; raise if any fails (torch names the rank)."""
    context = mp.start_processes(
        _worker, args=(function, args, count, address, port, cpu), nprocs=count, join=False, start_method="fork"
    )
    while not context.join():
        pass


def _worker(rank: int, function: Callable[..., Any], args: tuple[Any, ...], count: int, address: str, port: int,
            cpu: bool) -> None:
    variables = {
        "RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": count, "LOCAL_WORLD_SIZE": count, "GROUP_RANK": 0,
        "MASTER_ADDR": address, "MASTER_PORT": port, "OMP_NUM_THREADS": max(1, (os.cpu_count() or 1) // count),
    }
    if cpu:
        variables["ACCEL_USE_CPU"] = "1"
    os.environ.update({name: str(value) for name, value in variables.items()})
    function(*args)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
