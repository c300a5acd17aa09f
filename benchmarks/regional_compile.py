"""Compile time and step time: whole-model torch.compile against regional compilation against eager.

The example GPT (examples/gpt.py; 8 blocks by default) is prepared by an Accelerator three ways:
eager, `TorchDynamoPlugin(backend)` (the whole model compiled) and
`TorchDynamoPlugin(backend, use_regional_compilation=True)` (each block compiled on its own, the
blocks sharing one compiled code). Each run is a fresh process with an empty inductor cache, so
the first step pays the whole compile, as a new job does. Reported per variant: the first step
(compile included) and the compile time (first step minus the fastest later step), and the fastest
of --steps timed steps after --warmup (the one least disturbed by other work), as the median over
--rounds rounds (the variants take turns in each round, so that the load of a shared machine falls
on all alike). The losses after the first step must agree.

    python benchmarks/regional_compile.py                               # inductor, 8 blocks, 2 rounds
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
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

from _timing import format_table, time_steps  # noqa: E402

VARIANTS = ("eager", "whole", "regional")


def measure(variant: str, args: argparse.Namespace) -> dict[str, float]:
    """In this process: one variant's first step, fastest later step and first loss."""
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

    start = time.perf_counter()
    loss = step()
    first = time.perf_counter() - start
    for _ in range(args.warmup):
        step()
    fastest = min(time_steps(step, args.steps)) / 1e9
    return {"first_s": first, "step_ms": fastest * 1e3, "compile_s": first - fastest, "loss": loss}


def run_variant(variant: str, args: argparse.Namespace) -> dict[str, float]:
    """One variant in a fresh process with its own empty inductor cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        command = [sys.executable, __file__, "--variant", variant, *sys.argv[1:]]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="inductor", help="dynamo_backend of the compiled variants")
    parser.add_argument("--precision", default="no", help="mixed_precision of every variant")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each runs every variant once, in turn")
    parser.add_argument("--steps", type=int, default=5, help="timed steps after the warmup (the fastest counts)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--n_layer", type=int, default=8)
    parser.add_argument("--n_embd", type=int, default=128)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one measurement, in a child
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(measure(args.variant, args)))
        return
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{torch.get_num_threads()} threads; example GPT {args.n_layer} blocks, width {args.n_embd}, batch "
          f"{args.batch_size}x64, {args.precision}; backend {args.backend}; {args.rounds} rounds", flush=True)
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for round_ in range(args.rounds):
        for variant in VARIANTS:
            results[variant].append(run_variant(variant, args))
            print(f"round {round_ + 1}: {variant} {results[variant][-1]}", flush=True)
    rows = []
    for variant, runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        rows.append([variant, median["first_s"], median["compile_s"] if variant != "eager" else 0.0,
                     median["step_ms"], median["loss"]])
    print(format_table(["variant", "first step s", "compile s", "step ms", "loss after step 1"], rows))


if __name__ == "__main__":
    main()
