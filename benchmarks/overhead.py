"""Per-step overhead of accel over the same training loop written by hand.

For each model and precision, two copies of one initialised model train on one fixed
batch: one in a hand-written loop (torch.autocast + torch.amp.GradScaler for fp16), one
through `Accelerator.prepare` and `accelerator.backward`. Both do the same work per step:
forward, loss, backward, optimizer step, scheduler step, zero_grad(set_to_none=True).

Blocks of steps alternate (hand, accel, hand, accel, ...) after a warm-up, so that machine
noise and thermal drift hit both loops alike. Each step is timed with perf_counter_ns; the
table gives the median per-step time of each loop, accel's overhead in microseconds and in
percent, and the spread of that percentage over the (hand, accel) block pairs (median [min,
max] of accel block median / hand block median - 1). A case passes when the median over the
pairs is at most --limit (3% by default); the exit status is 1 when one does not.

    python benchmarks/overhead.py                      # tiny model; no, fp16 and bf16 (~2 min)
    python benchmarks/overhead.py --quick              # smoke run, a few seconds
    python benchmarks/overhead.py --models tiny,gpt --precisions no --out overhead.json
    python benchmarks/overhead.py --precisions no --stall_marks   # as a worker of `accel launch` (stall watch on)

Models: "tiny" is Linear(32,32)-ReLU-Linear(32,1) with SGD at batch 32, where any
per-step cost of the wrapper shows; "gpt" is the model of examples/gpt.py with AdamW at a
small batch.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

_ROOT = Path(__file__).resolve().parent.parent
for _path in (_ROOT / "benchmarks", _ROOT / "examples", _ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _timing import format_table, median_us, time_steps  # noqa: E402

import accel  # noqa: E402
from accel import Accelerator, AutocastKwargs  # noqa: E402

MODELS: tuple[str, ...] = ("tiny", "gpt")
DEFAULT_MODELS: tuple[str, ...] = ("tiny",)
PRECISIONS: tuple[str, ...] = ("no", "fp16", "bf16")
LIMIT = 0.03
"""The largest accepted overhead: accel's median per-step time at most 3% over the hand loop's."""

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Plan:
    """How many steps to run for one model: warm-up, steps per block, block pairs."""

    warmup: int
    steps_per_block: int
    pairs: int


# Default and --quick plans. The tiny model's blocks are short and many, so that the load of a
# shared machine changes little within a (hand, accel) pair. The gpt plans are per precision: fp16 matmuls on a CPU
# without native fp16 arithmetic are several times slower than fp32. The gpt model's
# first ~15 steps are slow (allocator and kernel warm-up), hence its longer warm-up.
PLANS: dict[tuple[str, str, bool], Plan] = {
    ("tiny", "no", False): Plan(warmup=500, steps_per_block=500, pairs=30),
    ("tiny", "fp16", False): Plan(warmup=500, steps_per_block=500, pairs=30),
    ("tiny", "bf16", False): Plan(warmup=500, steps_per_block=500, pairs=30),
    ("gpt", "no", False): Plan(warmup=20, steps_per_block=50, pairs=6),
    ("gpt", "fp16", False): Plan(warmup=10, steps_per_block=20, pairs=5),
    ("gpt", "bf16", False): Plan(warmup=20, steps_per_block=50, pairs=6),
    ("tiny", "no", True): Plan(warmup=100, steps_per_block=200, pairs=4),
    ("tiny", "fp16", True): Plan(warmup=100, steps_per_block=200, pairs=4),
    ("tiny", "bf16", True): Plan(warmup=100, steps_per_block=200, pairs=4),
    ("gpt", "no", True): Plan(warmup=10, steps_per_block=5, pairs=2),
    ("gpt", "fp16", True): Plan(warmup=3, steps_per_block=2, pairs=2),
    ("gpt", "bf16", True): Plan(warmup=3, steps_per_block=2, pairs=2),
}


@dataclass
class Workload:
    """A model (on CPU, freshly initialised), one fixed batch, the loss and optimizer."""

    name: str
    model: nn.Module
    inputs: torch.Tensor
    targets: torch.Tensor
    loss_fn: LossFn
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    batch_size: int


@dataclass
class Result:
    """Timings of one (model, precision) case; times in microseconds."""

    model: str
    precision: str
    accel_precision: str
    device: str
    batch_size: int
    warmup: int
    steps_per_block: int
    pairs: int
    hand_median_us: float
    accel_median_us: float
    ratio: float
    overhead_us: float
    pair_overheads_us: list[float]
    pair_ratios: list[float]
    """accel block median / hand block median, for each (hand, accel) block pair."""


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, as in examples/train_gpt.py."""
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def tiny_workload(seed: int) -> Workload:
    """Linear(32,32)-ReLU-Linear(32,1), MSE, SGD, batch 32: almost no compute per step."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    return Workload(
        name="tiny",
        model=model,
        inputs=torch.randn(32, 32),
        targets=torch.randn(32, 1),
        loss_fn=F.mse_loss,
        make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9),
        batch_size=32,
    )


def gpt_workload(seed: int, batch_size: int) -> Workload:
    """The example GPT (examples/gpt.py), AdamW, one batch of real corpus windows."""
    from gpt import GPT, GPTConfig, build_datasets

    torch.manual_seed(seed)
    config = GPTConfig()
    model = GPT(config)
    train, _ = build_datasets(config.block_size, seed=seed)
    xs, ys = zip(*(train[i * 1000] for i in range(batch_size)), strict=True)
    return Workload(
        name="gpt",
        model=model,
        inputs=torch.stack(xs),
        targets=torch.stack(ys),
        loss_fn=lm_loss,
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4),
        batch_size=batch_size,
    )


def constant_lr(_: int) -> float:
    """LambdaLR factor 1: the scheduler runs its step but leaves the rate unchanged."""
    return 1.0


def hand_step(work: Workload, precision: str, device: torch.device) -> Callable[[], None]:
    """The loop written by hand with plain PyTorch, on a deep copy of the model."""
    model = copy.deepcopy(work.model).to(device)
    optimizer = work.make_optimizer(model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, constant_lr)
    x, y, loss_fn = work.inputs.to(device), work.targets.to(device), work.loss_fn

    if precision == "no":

        def step() -> None:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    if precision == "bf16":

        def step_bf16() -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

        return step_bf16

    if precision != "fp16":
        raise ValueError(f"no hand-written loop for precision {precision!r}")
    scaler = torch.amp.GradScaler(device.type)

    def step_fp16() -> None:
        with torch.autocast(device.type, dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    return step_fp16


def accel_step(work: Workload, accelerator: Accelerator) -> Callable[[], None]:
    """The same loop through accel, on another deep copy of the same model."""
    model = copy.deepcopy(work.model)
    optimizer = work.make_optimizer(model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, constant_lr)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    device = accelerator.device
    x, y, loss_fn = work.inputs.to(device), work.targets.to(device), work.loss_fn

    def step() -> None:
        loss = loss_fn(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def device_sync(device: torch.device) -> Callable[[], None] | None:
    """A function that waits for the device to finish, where it runs asynchronously."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    return None


def run_case(
    work: Workload, precision: str, plan: Plan, verbose: bool, keep_output_dtype: bool = False
) -> Result:
    """Warm both loops up, then time alternating blocks (hand, accel, ...) of steps.

    `keep_output_dtype`: AutocastKwargs(convert_outputs_to_fp32=False), so that accel, like the
    hand loop, does not cast the model's 16-bit outputs to fp32 (Accelerate's default does).
    """
    handlers = [AutocastKwargs(convert_outputs_to_fp32=False)] if keep_output_dtype else []
    accelerator = Accelerator(mixed_precision=precision, kwarg_handlers=handlers)
    if accelerator.mixed_precision != precision:
        raise RuntimeError(
            f"asked accel for {precision!r}, it runs {accelerator.mixed_precision!r}: "
            "the comparison would not be like for like"
        )
    device = accelerator.device
    sync = device_sync(device)
    loops = {
        "hand": hand_step(work, precision, device),
        "accel": accel_step(work, accelerator),
    }
    for step in loops.values():
        time_steps(step, plan.warmup, sync)

    times: dict[str, list[int]] = {"hand": [], "accel": []}
    pair_overheads: list[float] = []
    pair_ratios: list[float] = []
    for pair in range(plan.pairs):
        block_medians: dict[str, float] = {}
        for name, step in loops.items():
            block = time_steps(step, plan.steps_per_block, sync)
            times[name].extend(block)
            block_medians[name] = median_us(block)
        pair_overheads.append(block_medians["accel"] - block_medians["hand"])
        pair_ratios.append(block_medians["accel"] / block_medians["hand"])
        if verbose:
            print(
                f"  {work.name}/{precision} pair {pair + 1}/{plan.pairs}: "
                f"hand {block_medians['hand']:.1f} us, accel {block_medians['accel']:.1f} us",
                file=sys.stderr,
            )

    hand, acc = median_us(times["hand"]), median_us(times["accel"])
    return Result(
        model=work.name,
        precision=precision,
        accel_precision=str(accelerator.mixed_precision),
        device=str(device),
        batch_size=work.batch_size,
        warmup=plan.warmup,
        steps_per_block=plan.steps_per_block,
        pairs=plan.pairs,
        hand_median_us=hand,
        accel_median_us=acc,
        ratio=acc / hand,
        overhead_us=acc - hand,
        pair_overheads_us=pair_overheads,
        pair_ratios=pair_ratios,
    )


def pair_overhead(result: Result) -> float:
    """accel's overhead as a fraction: the median over block pairs of accel / hand - 1."""
    return statistics.median(result.pair_ratios) - 1.0


def result_row(result: Result, limit: float) -> list[object]:
    """One table row: medians, overhead in us and %, its spread over block pairs, the verdict."""
    percents = [100 * (r - 1.0) for r in result.pair_ratios]
    spread = f"{statistics.median(percents):+.1f} [{min(percents):+.1f}, {max(percents):+.1f}]"
    return [
        result.model,
        result.precision,
        result.batch_size,
        result.steps_per_block * result.pairs,
        result.hand_median_us,
        result.accel_median_us,
        result.overhead_us,
        spread,
        "ok" if pair_overhead(result) <= limit else f"over {limit:.0%}",
    ]


def parse_list(text: str, allowed: Sequence[str], flag: str) -> list[str]:
    """Split a comma-separated flag value and check each item against `allowed`."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise SystemExit(f"{flag}: {text!r} is not a comma list of {', '.join(allowed)}")
    return items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few steps: a smoke run")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma list of tiny,gpt")
    parser.add_argument(
        "--precisions", default=",".join(PRECISIONS), help="comma list of no,fp16,bf16"
    )
    parser.add_argument(
        "--limit", type=float, default=LIMIT, help="largest accepted overhead (0.03: 3%%)"
    )
    parser.add_argument("--gpt_batch_size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the results as JSON here")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads (default: torch's own); 1 is steadier on a busy machine",
    )
    parser.add_argument("--verbose", action="store_true", help="print each block pair")
    parser.add_argument(
        "--stall_marks",
        action="store_true",
        help="map the stall marks and start the stacks thread, as `accel launch` does in each worker (its stall "
        "report, on by default): accelerator.backward then marks itself on every step",
    )
    parser.add_argument(
        "--keep_output_dtype",
        action="store_true",
        help="fp16/bf16: AutocastKwargs(convert_outputs_to_fp32=False), as the hand loop",
    )
    args = parser.parse_args(argv)
    args.models = parse_list(args.models, MODELS, "--models")
    args.precisions = parse_list(args.precisions, PRECISIONS, "--precisions")
    return args


def environment() -> dict[str, object]:
    """What the numbers depend on, for the JSON output and the table's header."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "accel": getattr(accel, "__version__", "unknown"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the selected cases, print the table, optionally write JSON."""
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.stall_marks:
        import tempfile

        from accel.distributed.stall_marks import open_marks

        open_marks(Path(tempfile.mkdtemp(prefix="accel-overhead-stalls-")), "0")
    env = environment()
    print(
        f"accel {env['accel']} | torch {env['torch']} | python {env['python']} | "
        f"{env['torch_threads']} threads" + (" | --quick" if args.quick else "")
        + (" | --stall_marks" if args.stall_marks else "")
    )
    results: list[Result] = []
    for model_name in args.models:
        work = (
            tiny_workload(args.seed)
            if model_name == "tiny"
            else gpt_workload(args.seed, args.gpt_batch_size)
        )
        for precision in args.precisions:
            plan = PLANS[(model_name, precision, args.quick)]
            results.append(run_case(work, precision, plan, args.verbose, args.keep_output_dtype))

    headers = [
        "model", "precision", "batch", "steps", "hand us", "accel us", "overhead us",
        "overhead % per pair: median [min, max]", f"<= {args.limit:.0%}",
    ]  # fmt: skip
    print(format_table(headers, [result_row(r, args.limit) for r in results]))
    print(
        "us: median per-step time over all timed steps; overhead us = accel - hand; overhead % "
        "per pair: accel block median / hand block median - 1, over adjacent (hand, accel) "
        "block pairs; the verdict uses the median over the pairs"
    )
    if args.out:
        payload = {
            "environment": env,
            "quick": args.quick,
            "stall_marks": args.stall_marks,
            "results": [asdict(r) for r in results],
        }
        Path(args.out).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"results written to {args.out}")
    return 0 if all(pair_overhead(r) <= args.limit for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
