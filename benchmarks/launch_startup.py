"""Start-up time of `accel launch` against torchrun's: from the command to the process group.

    PYTHONPATH=. python benchmarks/launch_startup.py [--runs 5] [--processes 2]

Each launcher runs a trivial script with 2 processes on the CPU (gloo): it joins the process
group, prints the wall-clock time, and leaves. The time counted is from starting the launcher to
the last rank's process group being up (each rank writes the time to a file); the table gives the
median of `--runs` runs, the launchers taking turns, so that a busy machine slows both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """\
import os, time
import torch.distributed as dist
dist.init_process_group("gloo")
with open(os.path.join(os.environ["STARTUP_TIMES"], "up" + os.environ["RANK"]), "w") as file:
    file.write(str(time.time()))
dist.barrier()
dist.destroy_process_group()
"""


def launchers(processes: int) -> dict[str, list[str]]:
    """Name -> command before the script."""
    python = sys.executable
    return {
        "torchrun": [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)],
        "accel launch": [python, "-m", "accel", "launch", "--cpu", "--num_processes", str(processes)],
    }


def seconds_to_group(command: list[str], script: Path) -> float:
    """Seconds from starting `command script` to the last rank's process group being up.

    A command may start with `PYTHONPATH=...` (`--compare`): that variable is set for it.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    if command[0].startswith("PYTHONPATH="):
        env["PYTHONPATH"], command = command[0].split("=", 1)[1], command[1:]
    env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as folder:
        env["STARTUP_TIMES"] = folder
        start = time.time()
        done = subprocess.run([*command, str(script)], env=env, capture_output=True, text=True, timeout=300, check=False)
        ups = [float(path.read_text()) for path in Path(folder).glob("up*")]
    if done.returncode != 0 or not ups:
        raise RuntimeError(f"{' '.join(command[:4])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return max(ups) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--compare", metavar="PATH", help="also time the accel found at PATH (a checkout)")
    args = parser.parse_args()
    commands = launchers(args.processes)
    if args.compare:  # another accel, say the version before a change
        commands[f"accel launch ({args.compare})"] = [f"PYTHONPATH={args.compare}", *commands["accel launch"]]
    times: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "trivial.py"
        script.write_text(SCRIPT)
        for _ in range(args.runs):
            for name, command in commands.items():
                times[name].append(seconds_to_group(command, script))
    base = statistics.median(times["torchrun"]) if "torchrun" in times else None
    print(f"| launcher | median s to process group ({args.runs} runs, {args.processes} processes) | vs torchrun | runs |")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        ratio = f"{median / base:.2f}x" if base else "-"
        print(f"| {name} | {median:.2f} | {ratio} | {', '.join(f'{v:.1f}' for v in values)} |")


if __name__ == "__main__":
    main()
