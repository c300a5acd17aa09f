"""How long a plan at scale takes: `accel.estimate.plan.plan_layout` on torch's fake process group, in one process.

    python benchmarks/plan_scale.py [--models llama3-8b,llama3-70b] [--worlds 8,64,1024]

For each model and world size it builds the model on the meta device and shards it as the job would (FSDP2 over
every rank at 8 and 1,024; HSDP 8 x 8 at 64; and FSDP2 x tp 8 at the largest world), for the first and the last
rank, and prints the seconds that took (building included, the first build paying transformers' import) and rank
0's bytes. It also times `accel launch --dry_run` from the shell, the way a user runs it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from accel.estimate.models import build_on_meta
from accel.estimate.plan import plan_layout
from accel.parallel.config import ParallelismConfig


def layouts(world: int, largest: int) -> list[tuple[str, ParallelismConfig]]:
    """The layouts timed at `world` ranks."""
    found = [("hsdp 8x8", ParallelismConfig(dp_replicate_size=8, dp_shard_size=8)) if world == 64 else
             (f"fsdp {world}", ParallelismConfig(dp_shard_size=world))]
    if world == largest:
        found.append((f"fsdp {world // 8} x tp 8", ParallelismConfig(dp_shard_size=world // 8, tp_size=8)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="llama3-8b,llama3-70b")
    parser.add_argument("--worlds", default="8,64,1024")
    args = parser.parse_args()
    worlds = [int(world) for world in args.worlds.split(",")]
    build_on_meta("llama3-8b")  # transformers' import, once, outside the timings
    for name in args.models.split(","):
        for world in worlds:
            for label, config in layouts(world, max(worlds)):
                start = time.perf_counter()
                first, _ = plan_layout(lambda model=name: build_on_meta(model), config, world, "bf16")
                print(f"{name:11s} {label:18s} {time.perf_counter() - start:6.1f} s  rank 0: "
                      f"{first.held.total / 2**30:8.2f} GiB", flush=True)
    command = [sys.executable, "-m", "accel", "launch", "--num_processes", "1024", "--use_fsdp",
               "--parallelism_config_dp_shard_size", "128", "--parallelism_config_tp_size", "8",
               "--mixed_precision", "bf16", "--dry_run", "llama3-70b"]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    print(f"accel launch --dry_run llama3-70b, 1,024 ranks (dp_shard 128 x tp 8), from the shell: "
          f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
