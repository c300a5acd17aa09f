"""Compile time and step time: whole-model torch.compile against regional compilation against eager.

The example GPT (examples/gpt.py; 8 blocks, width 64, batch 8x64 by default) is prepared by an
Accelerator three ways: eager, `TorchDynamoPlugin(backend)` (the whole model compiled) and
`TorchDynamoPlugin(backend, use_regional_compilation=True)` (each block compiled on its own, the
blocks sharing one compiled code).

- First step (the compile, as a new job pays it): each variant's first step in a fresh process with
  an empty inductor cache, --rounds times (the variants take turns), median, min and max.
- Step time: one process holds all three, compiled and warmed up, and runs --step_rounds rounds of
  --steps steps of each in turn (so that the load of a shared machine falls on all alike); the
  fastest step of each per round (the one least disturbed by other work), median over rounds, and
  the median of the per-round ratio to eager.

The losses after the first step must agree.

    python benchmarks/regional_compile.py                               # inductor, 2 rounds
    python benchmarks/regional_compile.py --backend aot_eager --n_layer 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

from _timing import format_table, time_steps  # noqa: E402

VARIANTS = ("eager", "whole", "regional")
"""No compile, torch.compile of the whole model, each block compiled on its own."""


def make_step(variant: str, args: argparse.Namespace) -> Callable[[], float]:
    """A training step of the example GPT prepared by an Accelerator as `variant` says."""
    import torch.nn.functional as F
    from gpt import GPT, GPTConfig

    from accel import Accelerator
    from accel.utils import TorchDynamoPlugin

    backend = "no" if variant == "eager" else args.backend
    plugin = TorchDynamoPlugin(backend=backend, use_regional_compilation=variant == "regional")
    accelerator = Accelerator(cpu=True, mixed_precision=args.precision, dynamo_plugin=plugin)
    config = GPTConfig(n_layer=args.n_layer, n_embd=args.n_embd)
    torch.manual_seed(1)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    tokens = torch.randint(0, config.vocab_size, (args.batch_size, config.block_size + 1),
                           generator=torch.Generator().manual_seed(0))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> float:
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def first_step(variant: str, args: argparse.Namespace) -> dict[str, float]:
    """In a fresh process: the first step of `variant` (its compile included) and its loss."""
    step = make_step(variant, args)
    start = time.perf_counter()
    loss = step()
    return {"first_s": time.perf_counter() - start, "loss": loss}


def step_times(args: argparse.Namespace) -> dict[str, list[float]]:
    """In one process: every variant compiled, then --rounds rounds of --steps steps of each in turn; the
    fastest step of each variant per round, in ms."""
    steps = {variant: make_step(variant, args) for variant in VARIANTS}
    for step in steps.values():
        for _ in range(1 + args.warmup):
            step()
    fastest: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(args.rounds):
        for variant, step in steps.items():
            fastest[variant].append(min(time_steps(step, args.steps)) / 1e6)
    return fastest


def child(mode: str, args: argparse.Namespace) -> Any:
    """Run `mode` ('steps' or a variant's first step) in a fresh process with its own empty inductor cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        command = [sys.executable, __file__, "--child", mode, *sys.argv[1:]]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="inductor", help="dynamo_backend of the compiled variants")
    parser.add_argument("--precision", default="no", help="mixed_precision of every variant")
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per compiled variant (first step)")
    parser.add_argument("--step_rounds", type=int, default=6, help="rounds of the interleaved step timing")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant and round (the fastest counts)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--n_layer", type=int, default=8)
    parser.add_argument("--n_embd", type=int, default=64)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one measurement, in a fresh process
    args = parser.parse_args(argv)
    if args.child:
        if args.child == "steps":
            args.rounds = args.step_rounds
        print(json.dumps(step_times(args) if args.child == "steps" else first_step(args.child, args)))
        return
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{torch.get_num_threads()} threads; example GPT {args.n_layer} blocks, width {args.n_embd}, batch "
          f"{args.batch_size}x64, {args.precision}; backend {args.backend}", flush=True)
    firsts: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for round_ in range(args.rounds):
        for variant in VARIANTS:
            firsts[variant].append(child(variant, args))
            print(f"first step, round {round_ + 1}: {variant} {firsts[variant][-1]}", flush=True)
    fastest = child("steps", args)
    print(f"fastest step per round (ms): {fastest}", flush=True)
    rows = []
    for variant in VARIANTS:
        first = [run["first_s"] for run in firsts[variant]]
        ms = statistics.median(fastest[variant])
        ratios = [v / e for v, e in zip(fastest[variant], fastest["eager"])]
        rows.append([variant, statistics.median(first), min(first), max(first), ms, statistics.median(ratios),
                     firsts[variant][0]["loss"]])
    print(format_table(["variant", "first step s (median)", "min", "max", "step ms", "step / eager (median)",
                        "loss after step 1"], rows))


if __name__ == "__main__":
    main()
