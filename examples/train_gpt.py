"""Train the small character-level GPT of examples/gpt.py with accel.

This is an ordinary PyTorch training script, written the way an Accelerate user writes one:
build the model, optimizer, dataloader and scheduler, hand them to `Accelerator.prepare`,
and let `accelerator.backward`, `accumulate` and `clip_grad_norm_` deal with precision,
gradient scaling and accumulation.

    python examples/train_gpt.py                          # fp32, 600 steps: about 90 s of CPU time
    python examples/train_gpt.py --mixed_precision bf16
    ACCEL_MIXED_PRECISION=fp16 python examples/train_gpt.py --steps 50
    accel launch --mixed_precision bf16 examples/train_gpt.py
    python examples/train_gpt.py --dynamo_backend inductor       # compiled (docs/compile.md)
    accel launch --num_processes 2 --use_fsdp examples/train_gpt.py   # sharded with FSDP2 (docs/fsdp.md)

`--mixed_precision` and `--gradient_accumulation_steps` default to None so that accel's own
configuration (`ACCEL_*` environment variables, set by `accel launch`) decides; a value given
here is passed to `Accelerator` unchanged, and `Accelerator` validates it.

`--steps` counts optimizer updates; with gradient accumulation each update consumes
several batches.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Subset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpt import GPT, CharDataset, GPTConfig, build_datasets

from accel import Accelerator, ThroughputKwargs

Batch = tuple[torch.Tensor, torch.Tensor]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags; defaults train 600 steps, about 90 s of CPU time on a 2-core CPU."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mixed_precision",
        default=None,
        help="passed to Accelerator as is (no, fp16, bf16, fp8, ...); "
        "default: $ACCEL_MIXED_PRECISION, else no",
    )
    parser.add_argument(
        "--gradient_accumulation_steps",
        type=int,
        default=None,
        help="batches per optimizer update; default: $ACCEL_GRADIENT_ACCUMULATION_STEPS, else 1",
    )
    parser.add_argument(
        "--dynamo_backend",
        default=None,
        help="passed to Accelerator as is: compile the model with torch.compile and this backend "
        "(inductor, aot_eager, ...; docs/compile.md); default: $ACCEL_DYNAMO_BACKEND, else no",
    )
    parser.add_argument("--steps", type=int, default=600, help="optimizer updates")
    parser.add_argument("--batch_size", type=int, default=32, help="sequences per batch")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--weight_decay", type=float, default=0.1)
    parser.add_argument("--warmup_steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument(
        "--eval_interval",
        type=int,
        default=200,
        help="validate every N updates (0: only at the ends)",
    )
    parser.add_argument("--eval_batches", type=int, default=8, help="batches per validation")
    parser.add_argument(
        "--log_interval", type=int, default=50, help="progress line every N updates when not a TTY"
    )
    parser.add_argument("--output_dir", default=None, help="save the trained model here")
    parser.add_argument(
        "--report_dir",
        default="runs/train_gpt",
        help="where the loss curve (loss.png, needs matplotlib: the examples extra) and its numbers (loss.csv) go; '' for none",
    )
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "eval_batches", "log_interval"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if args.eval_interval < 0 or args.warmup_steps < 0:
        parser.error("--eval_interval and --warmup_steps must not be negative")
    return args


def warmup_cosine(
    warmup_steps: int, total_steps: int, min_ratio: float = 0.1
) -> Callable[[int], float]:
    """LR multiplier for LambdaLR: linear warm-up, then cosine decay to `min_ratio`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, object]]:
    """Decay matrices (Linear and Embedding weights) only, not biases or LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def make_loaders(
    train: CharDataset, val: CharDataset, args: argparse.Namespace
) -> tuple[DataLoader[Batch], DataLoader[Batch]]:
    """Shuffled training loader (seeded) and a fixed, evenly spaced validation subset."""
    generator = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(
        train, batch_size=args.batch_size, shuffle=True, drop_last=True, generator=generator
    )
    n_val = min(len(val), args.eval_batches * args.batch_size)
    stride = len(val) // n_val
    val_subset = Subset(val, range(0, stride * n_val, stride))
    val_loader = DataLoader(val_subset, batch_size=args.batch_size, shuffle=False)
    return train_loader, val_loader


def adam_eps(param_dtype: torch.dtype) -> float:
    """AdamW's epsilon for weights kept in `param_dtype`: 1e-8 underflows to 0 in float16
    (16-true), where the update would then divide by zero."""
    return 1e-4 if param_dtype == torch.float16 else 1e-8


def write_report(run: Summary, folder: Path, what: str) -> list[Path]:
    """Write the loss curve's numbers (loss.csv) and, when matplotlib is installed, its plot (loss.png)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = folder / "loss.csv"
    with table.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["step", "split", "loss"])
        writer.writerows((step, split, f"{loss:.6f}") for step, split, loss in run.curve)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{folder / 'loss.png'} not written: matplotlib is not installed "
              "(pip install matplotlib, or install accel with its examples extra: pip install -e \".[examples]\")")
        return [table]
    figure, axes = plt.subplots(figsize=(7, 4))
    for split in ("train", "val"):
        points = [(step, loss) for step, kind, loss in run.curve if kind == split]
        axes.plot(*zip(*points), label=split, marker="o" if split == "val" else None)
    axes.set(xlabel="optimizer step", ylabel="loss", title=f"example GPT: {what}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(folder / "loss.png", dpi=100)
    plt.close(figure)
    return [table, folder / "loss.png"]


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all positions."""
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable[Batch],
    device: torch.device,
) -> float:
    """Mean validation loss, in eval mode; the model is put back in train mode after.

    Every process evaluates the same fixed subset, so the number needs no gathering.
    """
    model.eval()
    total, batches = 0.0, 0
    for x, y in loader:
        total += lm_loss(model(x.to(device)), y.to(device)).item()
        batches += 1
    model.train()
    return total / batches


class Progress:
    """One progress line without tqdm.

    On a TTY the line is redrawn in place after every update (carriage return); otherwise
    (a log file, CI) a plain line is printed every `interval` updates and at the end.
    Writes through `print_fn` (the accelerator's print) and only if `enabled`.
    """

    def __init__(
        self, total: int, print_fn: Callable[..., None], enabled: bool, interval: int
    ) -> None:
        self.total = total
        self.print_fn = print_fn
        self.enabled = enabled
        self.interval = interval
        self.tty = sys.stdout.isatty()
        self._width = 0

    def update(self, step: int, text: str) -> None:
        """Show `text` for update number `step` (1-based)."""
        if not self.enabled:
            return
        line = f"step {step:>{len(str(self.total))}}/{self.total} | {text}"
        if self.tty:
            self._width = max(self._width, len(line))
            self.print_fn("\r" + line.ljust(self._width), end="", flush=True)
        elif step % self.interval == 0 or step == self.total:
            self.print_fn(line, flush=True)

    def message(self, text: str) -> None:
        """Print `text` on a line of its own, without breaking the progress line."""
        if not self.enabled:
            return
        if self.tty and self._width:
            self.print_fn("\r" + " " * self._width + "\r", end="")
            self._width = 0
        self.print_fn(text, flush=True)

    def close(self) -> None:
        """End the in-place line so that later output starts on a fresh line."""
        if self.enabled and self.tty and self._width:
            self.print_fn()
            self._width = 0


class ContentionCheck:
    """Says once when this process gets far less CPU time than its threads could use.

    On a machine where other programs run, torch's threads wait on each other: two threads can be
    several times slower than one. Over the first `window` updates it compares the process's CPU
    time with the wall time times the thread count; below `threshold` it prints what to try.
    """

    def __init__(self, threads: int, window: int = 5, threshold: float = 0.6) -> None:
        self.threads, self.window, self.threshold = threads, window, threshold
        self.start = (time.process_time(), time.perf_counter())
        self.done = False

    def after_update(self, updates: int) -> str | None:
        """The hint, once, after the `window`-th update when the CPU share is low; else None."""
        if self.done or updates < self.window:
            return None
        self.done = True
        cpu = time.process_time() - self.start[0]
        wall = time.perf_counter() - self.start[1]
        return contention_hint(cpu, wall, self.threads, self.threshold)


def contention_hint(cpu_seconds: float, wall_seconds: float, threads: int, threshold: float = 0.6) -> str | None:
    """What to try when `cpu_seconds` is below `threshold` of what `threads` threads could use in `wall_seconds`.

    >>> contention_hint(2.0, 4.0, 2) is not None  # 25% of two threads' time: something else runs here
    True
    """
    share = cpu_seconds / max(wall_seconds * threads, 1e-9)
    if share >= threshold:
        return None
    advice = ("OMP_NUM_THREADS=1 (one thread per process) is often several times faster on a busy machine"
              if threads > 1 else "fewer processes, or a quieter machine, will be faster")
    return (f"note: this process got {share:.0%} of the CPU time its {threads} thread(s) could use so far: other "
            f"programs are running on this machine and the steps are slower than it can do; {advice}.")


@dataclass
class Summary:
    """What a run achieved: updates, training time, and the losses at both ends."""

    steps: int = 0
    seconds: float = 0.0
    first_train: float = math.nan
    last_train: float = math.nan
    first_val: float = math.nan
    last_val: float = math.nan
    curve: list[tuple[int, str, float]] = field(default_factory=list)
    """(update, "train" or "val", loss) for every update and every validation."""


def throughput_text(numbers: dict[str, float], window: tuple[int, int] | None) -> str:
    """The rates of one measurement window of `accelerator.throughput` (ThroughputKwargs), named by its steps.

    Steps/s, tokens/s (all processes) and MFU all come from the same window, wall-clock time included
    (validation too), so they agree with each other; "MFU unknown" where FLOPs were counted but no
    MFU was given (no peak for this device, or a rate above it). Empty until the first window ends.

    >>> throughput_text({"throughput/step_time_s": 0.5, "throughput/tokens_per_s": 8192.0,
    ...                  "throughput/tflops_per_device": 0.01, "throughput/mfu": 0.042}, (2, 11))
    ' | steps 2-11: 2.00 steps/s, 8,192 tok/s, MFU 4.2%'
    """
    if window is None or "throughput/step_time_s" not in numbers:
        return ""
    rates = [f"{1 / numbers['throughput/step_time_s']:.2f} steps/s"]
    if "throughput/tokens_per_s" in numbers:
        rates.append(f"{numbers['throughput/tokens_per_s']:,.0f} tok/s")
    if "throughput/mfu" in numbers:
        rates.append(f"MFU {numbers['throughput/mfu']:.1%}")
    elif "throughput/tflops_per_device" in numbers:
        rates.append("MFU unknown")
    return f" | steps {window[0]}-{window[1]}: {', '.join(rates)}"


def window(accelerator: Accelerator) -> tuple[int, int] | None:
    """The first and last optimizer step of the throughput monitor's last window, None before it ends."""
    monitor = accelerator.throughput_monitor
    return None if monitor is None else monitor.latest_window


def train(
    accelerator: Accelerator,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_loader: Iterable[Batch],
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    val_loader: Iterable[Batch],
    args: argparse.Namespace,
) -> Summary:
    """Run `args.steps` optimizer updates, epoch after epoch; validate at intervals.

    The summary's training time excludes validation (its steps/s is the training step's alone, over the whole
    run); the progress line shows the throughput monitor's last window instead, named by its steps.
    """
    progress = Progress(
        args.steps, accelerator.print, accelerator.is_main_process, args.log_interval
    )
    width = len(str(args.steps))
    summary = Summary()
    summary.first_val = summary.last_val = evaluate(model, val_loader, accelerator.device)
    summary.curve.append((0, "val", summary.first_val))
    progress.message(f"step {0:>{width}} | val loss {summary.first_val:.4f}")

    window_loss, window_batches = 0.0, 0
    contention = ContentionCheck(torch.get_num_threads())
    tick = time.perf_counter()
    model.train()
    while summary.steps < args.steps:
        for x, y in train_loader:
            with accelerator.accumulate(model):
                logits = model(x)
                loss = lm_loss(logits, y)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            window_loss += loss.item()
            window_batches += 1
            if not accelerator.sync_gradients:
                continue

            # One optimizer update finished: its loss is the mean over its micro-batches.
            summary.steps += 1
            summary.seconds += time.perf_counter() - tick
            summary.last_train = window_loss / window_batches
            window_loss, window_batches = 0.0, 0
            summary.curve.append((summary.steps, "train", summary.last_train))
            if summary.steps == 1:
                summary.first_train = summary.last_train
            progress.update(
                summary.steps,
                f"loss {summary.last_train:.4f}{throughput_text(accelerator.throughput, window(accelerator))} | "
                f"{accelerator.mixed_precision}",
            )
            hint = contention.after_update(summary.steps)
            if hint is not None:
                progress.message(hint)
            done = summary.steps == args.steps
            if done or (args.eval_interval and summary.steps % args.eval_interval == 0):
                summary.last_val = evaluate(model, val_loader, accelerator.device)
                summary.curve.append((summary.steps, "val", summary.last_val))
                progress.message(
                    f"step {summary.steps:>{width}} | train loss {summary.last_train:.4f} | "
                    f"val loss {summary.last_val:.4f}"
                )
            if done:
                break
            tick = time.perf_counter()
    progress.close()
    return summary


def main(argv: list[str] | None = None) -> int:
    """Build everything, prepare it with accel, train, print a summary, optionally save."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        dynamo_backend=args.dynamo_backend,
        kwarg_handlers=[ThroughputKwargs()],  # tokens/s and MFU in the progress line (docs/tracking.md)
    )

    config = GPTConfig()
    train_set, val_set = build_datasets(config.block_size, seed=args.seed)
    model = GPT(config)
    optimizer = torch.optim.AdamW(
        param_groups(model, args.weight_decay),
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=adam_eps(accelerator.precision.param_dtype),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(args.warmup_steps, args.steps)
    )
    train_loader, val_loader = make_loaders(train_set, val_set, args)
    model, optimizer, train_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, scheduler
    )
    accelerator.print(
        f"running: {accelerator.precision.describe()} | {accelerator.num_processes} process(es) | "
        f"gradient accumulation {accelerator.gradient_accumulation_steps} | "
        f"{torch.get_num_threads()} thread(s) per process | device {accelerator.device} | "
        f"distributed_type {accelerator.distributed_type.value}"
    )
    accelerator.print(
        f"GPT {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters | "
        f"train {len(train_set):,} / val {len(val_set):,} windows of {config.block_size} chars"
    )

    run = train(accelerator, model, optimizer, train_loader, scheduler, val_loader, args)
    accelerator.print(
        f"done: {run.steps} steps in {run.seconds:.1f}s ({run.steps / run.seconds:.2f} steps/s over all steps, "
        f"validation excluded), "
        f"precision {accelerator.mixed_precision} | train loss {run.first_train:.4f} -> "
        f"{run.last_train:.4f} | val loss {run.first_val:.4f} -> {run.last_val:.4f}"
    )
    if args.output_dir:
        accelerator.save_model(model, args.output_dir)
        accelerator.print(f"model saved to {args.output_dir}")
    if args.report_dir and accelerator.is_main_process:
        for path in write_report(run, Path(args.report_dir), accelerator.precision.describe()):
            accelerator.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
