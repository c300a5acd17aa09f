"""Per-step cost of FP8 health (FP8RecipeKwargs(health_interval=N)) on the native FP8 backend.

One loop per interval trains its own copy of one model through accel's native FP8 (the loop of
benchmarks/overhead.py: forward, loss, backward, optimizer and scheduler step, zero_grad); interval
0 is health off. Loops with health on log to the JSON-lines tracker in a temporary folder. Blocks
of steps alternate between the loops after a warm-up, so that machine noise hits all alike. The
table gives, per loop, the median per-step wall time, and the process's CPU time per step (this
thread's, over whole blocks, so it carries the report steps and not the waits for a CPU that other
programs hold: on a shared machine the steadier number), each against the off loop.

    python benchmarks/fp8_health.py                        # tiny model, intervals 0, 100 and 10
    python benchmarks/fp8_health.py --models gpt --intervals 0,100 --pairs 4
    PYTHONPATH=/path/to/other/checkout python benchmarks/fp8_health.py --intervals 0   # off elsewhere

Interval 0 builds the recipe without the field, so the last line times health-off against a
checkout that has no FP8 health at all.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

_ROOT = Path(__file__).resolve().parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from _timing import format_table, time_steps  # noqa: E402
from overhead import Workload, accel_step, gpt_workload, tiny_workload  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402


def health_loop(work: Workload, interval: int, folder: Path) -> Callable[[], None]:
    """One training step of `work` on native FP8 (fp32 base), with FP8 health every `interval` steps (0: off)."""
    recipe = {"backend": "native", "base_precision": "fp32"}
    if interval:
        recipe["health_interval"] = interval  # type: ignore[assignment]  # an int field
        accelerator = Accelerator(
            mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(**recipe)], log_with="jsonl",
            project_dir=folder / str(interval),
        )
        accelerator.init_trackers("health")
    else:
        accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(**recipe)])
    return accel_step(work, accelerator)


def run(
    work: Workload, intervals: list[int], warmup: int, steps: int, pairs: int
) -> tuple[dict[int, list[int]], dict[int, list[float]]]:
    """Per interval, every timed step's wall nanoseconds, and each block's CPU nanoseconds per step."""
    with tempfile.TemporaryDirectory() as folder:
        loops = {interval: health_loop(work, interval, Path(folder)) for interval in intervals}
        for step in loops.values():
            time_steps(step, warmup)
        times: dict[int, list[int]] = {interval: [] for interval in intervals}
        cpu: dict[int, list[float]] = {interval: [] for interval in intervals}
        for _ in range(pairs):
            for interval, step in loops.items():
                start = time.thread_time_ns()
                times[interval].extend(time_steps(step, steps))
                cpu[interval].append((time.thread_time_ns() - start) / steps)
    return times, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny", help="comma list of tiny,gpt")
    parser.add_argument("--intervals", default="0,100,10", help="comma list of health intervals; 0 is off")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200, help="steps per block (a multiple of every interval)")
    parser.add_argument("--pairs", type=int, default=6, help="blocks per loop")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    intervals = [int(i) for i in args.intervals.split(",")]
    rows = []
    for name in args.models.split(","):
        work = tiny_workload(0) if name == "tiny" else gpt_workload(0, 4)
        times, cpu = run(work, intervals, args.warmup, args.steps, args.pairs)
        for interval, ns in times.items():
            wall, used = statistics.median(ns) / 1e3, statistics.median(cpu[interval]) / 1e3
            vs = ("", "")
            if 0 in times and interval != 0:
                base_wall, base_cpu = statistics.median(times[0]) / 1e3, statistics.median(cpu[0]) / 1e3
                vs = (f"{wall - base_wall:+.1f}", f"{used - base_cpu:+.1f} ({used / base_cpu - 1:+.1%})")
            rows.append([name, interval or "off", len(ns), f"{wall:.1f}", f"{used:.1f}", *vs])
    headers = ["model", "health_interval", "steps", "wall us (median)", "CPU us/step", "wall vs off", "CPU vs off"]
    print(format_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
