"""DDP, FSDP2 and HSDP (and, given --tp, tensor parallelism and FSDP2 + TP) on 2 and 4 processes:
bytes each process holds and step time, with the example GPT (examples/gpt.py, 0.83M parameters, fp32).

    python benchmarks/parallelism.py [--processes 2,4] [--tp 1] [--batch 8] [--steps 10] [--rounds 3]

Runs itself under `accel launch --cpu` once per process count, and in that launch builds one
Accelerator per layout, one after another, `--rounds` times (layouts interleaved, so a slower
period of the machine is shared out). Per layout it reports:

* **bytes per process**: parameters + gradients + AdamW state this process holds after a step and a
  backward (a DTensor's local shard counted, as benchmarks/fsdp.py counts), the maximum over processes;
* **step time**: the median of `--steps` timed steps (after 3 warm-up steps), the median over rounds,
  for the same global batch (`--batch` sequences per data-parallel rank).

Layouts (`layouts()`): ddp (no parallelism_config), fsdp2 (dp_shard = N), hsdp (dp_replicate = 2,
dp_shard = N / 2; from 4 processes). With `--tp T`: tp (tp = T, FSDP2 over the other N / T) and,
where N / T > 1, the same as HSDP + TP; the rows appear once tensor parallelism is available.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "examples")]

Layout = tuple[dict[str, int] | None, bool]
"""ParallelismConfig sizes (None: no parallelism_config) and whether FSDP2 shards."""


def layouts(processes: int, tp: int) -> dict[str, Layout]:
    """The layouts measured on `processes` processes; tp > 1 adds the tensor-parallel ones."""
    found: dict[str, Layout] = {"ddp": (None, False), "fsdp2": ({"dp_shard_size": processes}, True)}
    if processes >= 4 and processes % 2 == 0:
        found["hsdp"] = ({"dp_replicate_size": 2, "dp_shard_size": processes // 2}, True)
    if tp > 1 and processes % tp == 0:
        rest = processes // tp
        found[f"tp{tp}"] = ({"tp_size": tp}, False) if rest == 1 else ({"dp_shard_size": rest, "tp_size": tp}, True)
        if rest >= 4 and rest % 2 == 0:
            found[f"hsdp+tp{tp}"] = ({"dp_replicate_size": 2, "dp_shard_size": rest // 2, "tp_size": tp}, True)
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="2,4", help="process counts, comma-separated (default 2,4)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size of the tp rows (default 1: none)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per data-parallel rank and step (default 8)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round (default 10, after 3 warm-up)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all layouts (default 3)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    rows = []
    for processes in (int(n) for n in args.processes.split(",")):
        for name, result in launch(processes, args).items():
            rows.append([name, processes, *(f"{result[k] / 1024:.0f}" for k in ("params", "grads", "optimizer")),
                         f"{result['total'] / 1024:.0f}", f"{result['step_ms']:.1f}"])
    from _timing import format_table

    print(format_table(["layout", "processes", "params KiB", "grads KiB", "AdamW KiB", "total KiB/process",
                        "step ms"], rows))
    return 0


def launch(processes: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The worker under accel launch on `processes` processes; what process 0 reported."""
    command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", str(processes), __file__,
               "--worker", "--tp", str(args.tp), "--batch", str(args.batch), "--steps", str(args.steps),
               "--rounds", str(args.rounds)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the run on {processes} processes failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("BENCH "):])


# ---------------------------------------------------------------------------------------- the worker
def accelerator_for(layout: Layout) -> Any:
    from accel import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig

    sizes, sharded = layout
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["Block"]) if sharded else None
    config = None if sizes is None else ParallelismConfig(**sizes)
    return Accelerator(cpu=True, fsdp_plugin=plugin, parallelism_config=config)


def batch_for(step: int, size: int, accelerator: Any) -> tuple[Any, Any]:
    """This data-parallel rank's part of step `step`'s global batch (the ranks of one tp group share it)."""
    import torch
    from fsdp import corpus_tokens
    from gpt import GPTConfig

    block = GPTConfig().block_size
    data = corpus_tokens()
    state = accelerator.process_state
    total = size * state.data_parallel_size
    starts = torch.randint(len(data) - block - 1, (total,), generator=torch.Generator().manual_seed(step))
    mine = starts[state.data_parallel_index * size:(state.data_parallel_index + 1) * size]
    windows = torch.stack([data[s: s + block + 1] for s in mine.tolist()])
    return windows[:, :-1].to(accelerator.device), windows[:, 1:].to(accelerator.device)


def measure(layout: Layout, args: argparse.Namespace) -> dict[str, float]:
    """Bytes this process holds and the median step time of one layout."""
    import torch
    from fsdp import build, count_bytes, train_step

    accelerator = accelerator_for(layout)
    model, optimizer = build(accelerator)
    batches = [batch_for(i, args.batch, accelerator) for i in range(4)]
    times = []
    for i in range(3 + args.steps):
        start = time.perf_counter()
        train_step(accelerator, model, optimizer, batches[i % 4])
        times.append(time.perf_counter() - start)
    train_step(accelerator, model, optimizer, batches[0], step=False)  # gradients held, as in the step
    counted = count_bytes(accelerator, model, optimizer)
    largest = torch.tensor([counted["params"], counted["grads"], counted["optimizer"]], dtype=torch.float64)
    if accelerator.num_processes > 1:
        torch.distributed.all_reduce(largest, op=torch.distributed.ReduceOp.MAX)
    accelerator.end_training()
    params, grads, state = (float(x) for x in largest.tolist())
    return {"params": params, "grads": grads, "optimizer": state, "total": params + grads + state,
            "step_ms": 1e3 * statistics.median(times[3:])}


def worker(args: argparse.Namespace) -> int:
    """Every layout of this process count, `--rounds` times interleaved; the median step time over rounds."""
    import torch.distributed as dist

    processes = dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    results: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for name, layout in layouts(processes, args.tp).items():
            results.setdefault(name, []).append(measure(layout, args))
    summary = {name: {**runs[0], "step_ms": statistics.median(run["step_ms"] for run in runs)}
               for name, runs in results.items()}
    print("BENCH " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
