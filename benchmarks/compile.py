"""torch.compile through the Accelerator against eager, in each precision, on the example GPT.

For each precision, two copies of the example GPT (examples/gpt.py, same seed) are prepared by two
Accelerators, one eager and one with `dynamo_backend` (inductor by default); the compiled one is
warmed up first (its compile time is reported on its own). Then both train on one fixed batch,
interleaved: per round, --steps steps eager, then --steps steps compiled, so that the load of a
shared machine falls on both alike. Each run's fastest step stands for it (the one least disturbed
by other work). Reported: the median over rounds of those ms per step, and the compiled/eager
ratio of every round (min / median / max), plus the loss after the first step of each (the two
must agree: compiling changes no arithmetic meaning). A precision whose 16-bit matrix products
this CPU emulates (about 100x slower) is listed as skipped with the reason, unless --all is given.

    python benchmarks/compile.py                         # inductor, default precisions
    python benchmarks/compile.py --backend aot_eager --rounds 3 --precisions no bf16
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from _timing import format_table, time_steps  # noqa: E402
from gpt import GPT, GPTConfig  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402
from accel.cli.capabilities import speed_note  # noqa: E402

PRECISIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "no": ("no", {}),
    "fp16": ("fp16", {}),
    "bf16": ("bf16", {}),
    "bf16-true": ("bf16-true", {}),
    "fp8-native": ("fp8", {"backend": "native"}),
    "fp8-native-O1": ("fp8", {"backend": "native", "optimization_level": "O1"}),
    "fp8-native-O2": ("fp8", {"backend": "native", "optimization_level": "O2"}),
    "fp8-ao": ("fp8", {"backend": "ao"}),
}
"""Label -> (mixed_precision, FP8 recipe fields)."""

Step = Callable[[], float]


def make_step(precision: str, recipe: dict[str, Any], backend: str, config: GPTConfig, batch: int) -> tuple[Step, str]:
    """A training step of the example GPT through an Accelerator; and what ran (the precision's description)."""
    handlers = [FP8RecipeKwargs(**recipe)] if recipe else []
    accelerator = Accelerator(mixed_precision=precision, kwarg_handlers=handlers, dynamo_backend=backend)
    torch.manual_seed(1)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (batch, config.block_size + 1), generator=generator)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> float:
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step, accelerator.precision.describe()


def compare(label: str, backend: str, args: argparse.Namespace, config: GPTConfig) -> list[Any]:
    """One table row: eager and compiled ms/step, the ratio's spread over rounds, compile time, first losses."""
    precision, recipe = PRECISIONS[label]
    eager, ran = make_step(precision, recipe, "no", config, args.batch_size)
    compiled, _ = make_step(precision, recipe, backend, config, args.batch_size)
    eager_loss = eager()
    start = time.perf_counter()
    compiled_loss = compiled()
    compile_s = time.perf_counter() - start
    for _ in range(args.warmup):
        eager(), compiled()
    ratios, eager_ms, compiled_ms = [], [], []
    for _ in range(args.rounds):
        e = min(time_steps(eager, args.steps)) / 1e6  # the fastest step: least disturbed by other work
        c = min(time_steps(compiled, args.steps)) / 1e6
        eager_ms.append(e)
        compiled_ms.append(c)
        ratios.append(c / e)
    return [label, statistics.median(eager_ms), statistics.median(compiled_ms), min(ratios),
            statistics.median(ratios), max(ratios), compile_s, eager_loss, compiled_loss, ran]


def skipped(label: str, run_all: bool) -> str | None:
    """Why `label` is left out on this machine (None: it runs)."""
    precision, _ = PRECISIONS[label]
    note = None if run_all else speed_note(precision, torch.device("cpu"))
    return f"{label}: skipped, {note} (--all runs it)" if note else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="inductor", help="dynamo_backend of the compiled run")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (eager, compiled)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run of a round (the fastest counts)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each after the first")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--n_layer", type=int, default=4)
    parser.add_argument("--n_embd", type=int, default=128)
    parser.add_argument("--all", action="store_true", help="also run precisions this CPU emulates (slow)")
    args = parser.parse_args(argv)
    config = GPTConfig(n_layer=args.n_layer, n_embd=args.n_embd)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads; example GPT {args.n_layer} layers, width {args.n_embd}, "
          f"batch {args.batch_size}x{config.block_size}; backend {args.backend}; "
          f"{args.rounds} rounds x {args.steps} steps, interleaved", flush=True)
    rows = []
    for label in args.precisions:
        reason = skipped(label, args.all)
        if reason:
            print(reason, flush=True)
            continue
        rows.append(compare(label, args.backend, args, config))
        print(f"{label}: done", flush=True)
    headers = ["precision", "eager ms", "compiled ms", "ratio min", "ratio median", "ratio max",
               "compile s", "loss eager", "loss compiled", "what ran"]
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
