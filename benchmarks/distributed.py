"""Data-parallel speed on this machine: 1 process against N, training the example GPT (examples/gpt.py).

    python benchmarks/distributed.py [--processes 2] [--batch 16] [--steps 30] [--precision no]

Runs itself under `accel launch --cpu --num_processes 1` and then `--num_processes N` (with the
same per-process batch) and prints, for each:

* throughput: samples per second over all processes (each step trains N x batch samples);
* step time with DDP's gradient all-reduce, and inside `no_sync` (no all-reduce): the difference
  is what the all-reduce costs a step beyond what overlaps with the backward pass;
* all-reduce time per step measured by a DDP communication hook (from each bucket's hand-over to
  its completion, summed over the buckets), and one all-reduce of all gradients at once.

The single process runs with 1 thread and with one per core; the N processes get cores / N
threads each (accel launch sets OMP_NUM_THREADS). On a 2-core CPU data parallelism mostly
measures the overhead that multi-machine or multi-GPU runs would pay, not a speed-up.
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="processes of the data-parallel run (default 2)")
    parser.add_argument("--batch", type=int, default=16, help="sequences per process and step (default 16)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (default 20, after 5 warm-up steps)")
    parser.add_argument("--precision", default="no", help="mixed_precision (default no)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    cores = len(os.sched_getaffinity(0))
    single = [launch(1, args, threads) for threads in sorted({1, cores})]
    print(table([*single, launch(args.processes, args, None)], args))
    return 0


def launch(processes: int, args: argparse.Namespace, threads: int | None) -> dict[str, Any]:
    """Run the worker under accel launch (with OMP_NUM_THREADS=threads, or accel launch's choice
    of cores / processes when None); its result, reported by process 0."""
    command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", str(processes),
               "--mixed_precision", args.precision, __file__, "--worker", "--batch", str(args.batch),
               "--steps", str(args.steps)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_") and k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the {processes}-process run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("BENCH "):])


def worker(args: argparse.Namespace) -> int:
    """One process of the benchmark: time training steps with and without the all-reduce."""
    import torch

    from accel import Accelerator

    accelerator = Accelerator()
    result: dict[str, Any] = {"processes": accelerator.num_processes, "threads": torch.get_num_threads()}
    model, optimizer, batches = build(accelerator, args.batch)
    step = make_step(accelerator, model, optimizer, batches)
    synced = time_steps(step, args.steps)
    with accelerator.no_sync(model):
        unsynced = time_steps(step, args.steps)
    result.update(
        step_ms=1e3 * statistics.median(synced),
        no_sync_step_ms=1e3 * statistics.median(unsynced),
        samples_per_s=accelerator.num_processes * args.batch / statistics.median(synced),
        parameters=sum(p.numel() for p in model.parameters()),
    )
    if accelerator.num_processes > 1:
        result.update(allreduce_times(accelerator, args))
    accelerator.print("BENCH " + json.dumps(result))
    accelerator.end_training()
    return 0


def build(accelerator: Any, batch: int) -> tuple[Any, Any, list[tuple[Any, Any]]]:
    """The example GPT, AdamW and a few fixed random batches of token ids."""
    import torch

    from gpt import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig()
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(accelerator.process_index)
    tokens = [torch.randint(config.vocab_size, (batch, config.block_size + 1), generator=generator) for _ in range(4)]
    return model, optimizer, [(t[:, :-1].to(accelerator.device), t[:, 1:].to(accelerator.device)) for t in tokens]


def make_step(accelerator: Any, model: Any, optimizer: Any, batches: list[tuple[Any, Any]]) -> Any:
    import torch.nn.functional as F

    counter = iter(range(1 << 30))

    def step() -> None:
        inputs, targets = batches[next(counter) % len(batches)]
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    return step


def time_steps(step: Any, steps: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def allreduce_times(accelerator: Any, args: argparse.Namespace) -> dict[str, float]:
    """All-reduce time per step from a DDP communication hook, and for all gradients in one call."""
    import torch
    import torch.distributed as dist

    model, optimizer, batches = build(accelerator, args.batch)
    spans: list[float] = []

    def timed_allreduce(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations' objects
        start = time.perf_counter()
        tensor = bucket.buffer().div_(dist.get_world_size())
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def finished(done: Any) -> Any:
            spans.append(time.perf_counter() - start)
            return done.value()[0]

        return future.then(finished)

    model.register_comm_hook(None, timed_allreduce)
    step = make_step(accelerator, model, optimizer, batches)
    time_steps(step, 3, warmup=0)
    spans.clear()
    time_steps(step, args.steps, warmup=0)
    flat = torch.zeros(sum(p.numel() for p in model.parameters()), device=accelerator.device)
    whole = []
    for _ in range(args.steps):
        start = time.perf_counter()
        dist.all_reduce(flat)
        whole.append(time.perf_counter() - start)
    return {"hook_allreduce_ms_per_step": 1e3 * sum(spans) / args.steps,
            "one_allreduce_of_all_gradients_ms": 1e3 * statistics.median(whole)}


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"example GPT ({rows[0]['parameters'] / 1e6:.2f}M parameters), batch {args.batch} x 64 tokens per process, "
        f"mixed_precision={args.precision}, median of {args.steps} steps",
        "| processes | threads each | samples/s | step ms | step ms in no_sync | all-reduce ms/step (hook) "
        "| one all-reduce of all gradients ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        hook = row.get("hook_allreduce_ms_per_step")
        whole = row.get("one_allreduce_of_all_gradients_ms")
        lines.append(
            f"| {row['processes']} | {row['threads']} | {row['samples_per_s']:.1f} | {row['step_ms']:.1f} | "
            f"{row['no_sync_step_ms']:.1f} | {'-' if hook is None else f'{hook:.1f}'} | "
            f"{'-' if whole is None else f'{whole:.2f}'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
