"""torch.distributed.run's rendezvous and restart arguments for a launch plan, and what a failed rendezvous means.

One machine without a port: torchrun's `--standalone` rendezvous (c10d on a free local port).
Several machines (or a port): `rdzv_backend` static (the default, Accelerate's: fixed machine
ranks, machine 0 at main_process_ip:main_process_port) or c10d (elastic: machines may join late,
`min_machines` to `num_machines` of them, and restarts re-form the group across machines).
`max_restarts` and `monitor_interval` are torchrun's own. `rdzv_timeout` bounds every wait for
the other machines (static: the store's timeout; c10d: join_timeout), so that a machine that
never comes ends the launch with a message naming it instead of a long silent wait.

Torch-free: `accel launch` builds the command before anything imports torch.
"""

from __future__ import annotations

import socket
import time
from typing import Any

DEFAULT_PORT = 29500
"""The rendezvous port on machine 0 when several machines run and none was given (torchrun's default)."""
RENDEZVOUS_TIMEOUT_S = 300
"""Seconds a machine waits for the others (rdzv_timeout's default; torchrun's own is 600 or 900)."""
MONITOR_INTERVAL_S = 0.1
"""Seconds between the launcher's checks of its processes (monitor_interval's default, Accelerate's)."""
CPP_LOG_VARIABLE = "TORCH_CPP_LOG_LEVEL"
"""torch's C++ log level: the launcher sets FATAL for itself, so that a refused connection prints no stack dump."""


def rendezvous_arguments(plan: Any) -> list[str]:
    """The torchrun arguments for the rendezvous and the restarts of `plan` (plan.LaunchPlan).

    Example: two machines, this one machine 1, with --max_restarts 2 ->
    `--nnodes 2 --node_rank 1 --master_addr IP --master_port P --rdzv_conf timeout=300 --max_restarts 2 ...`.
    """
    restarts = [
        "--max_restarts", str(plan.get("max_restarts") or 0),
        "--monitor_interval", f"{plan.get('monitor_interval') or MONITOR_INTERVAL_S:g}",
    ]
    machines, port = plan.get("num_machines"), plan.get("main_process_port")
    backend = plan.get("rdzv_backend") or "static"
    timeout = plan.get("rdzv_timeout") or RENDEZVOUS_TIMEOUT_S
    if machines == 1 and port is None and not plan.get("rdzv_endpoint"):
        return ["--standalone", *restarts]  # c10d on a free local port, whichever backend was named
    address = plan.get("main_process_ip") or "127.0.0.1"
    port = port if port is not None else DEFAULT_PORT
    if backend == "static":
        return [
            "--nnodes", str(machines), "--node_rank", str(plan.get("machine_rank")),
            "--master_addr", address, "--master_port", str(port), "--rdzv_conf", f"timeout={timeout}", *restarts,
        ]
    low = plan.get("min_machines") or machines
    return [
        "--nnodes", f"{low}:{machines}", "--rdzv_backend", "c10d",
        "--rdzv_endpoint", plan.get("rdzv_endpoint") or f"{address}:{port}", "--rdzv_id", "accel",
        "--rdzv_conf", f"join_timeout={timeout}", *restarts,
    ]


def check_rendezvous(values: dict[str, Any]) -> str | None:
    """Why the rendezvous settings in `values` cannot work together, naming the setting and the fix; else None."""
    backend = values.get("rdzv_backend") or "static"
    machines = values.get("num_machines", 1)
    low = values.get("min_machines")
    if backend == "static":
        for name in ("rdzv_endpoint", "min_machines"):
            if values.get(name) is not None:
                return (f"{name} {values[name]} is read by the c10d rendezvous only, but rdzv_backend is static: "
                        f"add --rdzv_backend c10d, or drop {name} (static meets at main_process_ip:main_process_port)")
        if machines > 1 and (values.get("max_restarts") or 0) > 0:
            return (f"max_restarts {values['max_restarts']} with num_machines {machines} needs rdzv_backend c10d: the "
                    "static rendezvous cannot form the group again after a restart (the processes would look for "
                    "the previous attempt's addresses); add --rdzv_backend c10d")
        return None
    if low is not None and low > machines:
        return f"min_machines {low} is more than num_machines {machines}: it must be 1 to {machines}"
    endpoint = values.get("rdzv_endpoint")
    if endpoint is not None and not _is_endpoint(endpoint):
        return f"rdzv_endpoint {endpoint!r} is not HOST:PORT (such as 10.0.0.1:29400)"
    if machines > 1 and endpoint is None and not values.get("main_process_ip"):
        return (f"rdzv_backend c10d with num_machines {machines} needs rdzv_endpoint HOST:PORT (or main_process_ip): "
                "the address every machine meets at")
    return None


def _is_endpoint(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def wait_for_machine_0(address: str, port: int, timeout: float) -> bool:
    """Whether machine 0's rendezvous port at `address`:`port` accepts a connection within `timeout` seconds.

    Machine 0 starts listening when its launcher starts; another machine checks for it with a
    plain socket first, so that it gives up after `timeout` with accel's message (torch's own
    client retries past its timeout and logs a C++ stack dump per attempt).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.25)


def machine_ranks(machine: int, per_machine: int) -> str:
    """The global ranks of static machine `machine` as text: 'rank 2' or 'ranks 2-3'."""
    first, last = machine * per_machine, (machine + 1) * per_machine - 1
    return f"rank {first}" if first == last else f"ranks {first}-{last}"


def other_machines(this: int, machines: int) -> str:
    """The machines other than `this` as text: 'machine 1', or 'one or more of machines 0, 2, 3'."""
    others = [str(m) for m in range(machines) if m != this]
    return f"machine {others[0]}" if len(others) == 1 else f"one or more of machines {', '.join(others)}"
