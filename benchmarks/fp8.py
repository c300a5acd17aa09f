"""FP8 on this machine: speed, memory and accuracy of the native backend, measured side by side.

    python benchmarks/fp8.py                    # everything (about 10 minutes on 2 CPU cores)
    python benchmarks/fp8.py --quick            # smoke run: small shapes, a few steps
    python benchmarks/fp8.py --parts memory     # one part: speed, memory, accuracy

Speed: one training step (forward + backward + AdamW step + zero_grad) of a 2048-wide
2-layer MLP at batch 2048 and of the example GPT (examples/gpt.py), in fp32, in accel's
native FP8 (O1 and O2, through the Accelerator), in FP8 GEMMs alone (Float8Linear without
O1/O2 storage, for reference) and in torchao's float8 training (eager). The variants run
interleaved, one step each per repetition; medians of wall and process CPU time.

Memory: bytes per parameter of the converted layers that a step holds, counted from tensor
sizes right after backward (weights + gradients + optimizer state, all present then): fp32
AdamW against O1 and O2. Per-tensor scalars (scales, Adam's step) are counted too.

Accuracy: the example GPT trained for --steps steps, same seed, data and schedule (AdamW,
warm-up + cosine, clipping at 1.0, as examples/train_gpt.py) in fp32 and in native FP8
(HYBRID and E4M3, O1 and O2). Final training loss = mean of the last 20 steps.

Everything is written to --out (default benchmarks/out/fp8): report.md, *.csv, loss_curves.png.
On CPUs with AMX-INT8, torch routes same-dtype FP8 GEMMs to a slow oneDNN kernel; the native
layer switches oneDNN off around its GEMMs, and this script does the same around torchao's steps.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_ROOT = Path(__file__).resolve().parent.parent
for _path in (_ROOT / "examples", _ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from gpt import GPT, GPTConfig, build_datasets  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402
from accel.backends.native_fp8 import Float8Config, Float8Linear, convert_linears, scaler_group  # noqa: E402

Step = Callable[[], float]
PARTS = ("speed", "memory", "accuracy")


# --------------------------------------------------------------------------- models and steps
@dataclass(frozen=True)
class Workload:
    """A model factory and one fixed batch with its loss."""

    name: str
    make_model: Callable[[], nn.Module]
    inputs: torch.Tensor
    targets: torch.Tensor
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def mlp_workload(dim: int, batch: int) -> Workload:
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(batch, dim, generator=generator), torch.randn(batch, dim, generator=generator)

    def make() -> nn.Module:
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    return Workload(f"MLP {dim}x{dim}, 2 layers, batch {batch}", make, x, y, F.mse_loss)


def gpt_workload(config: GPTConfig, batch: int) -> Workload:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (batch, config.block_size + 1), generator=generator)

    def make() -> nn.Module:
        torch.manual_seed(1)
        return GPT(config)

    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    name = f"example GPT ({config.n_layer} layers, width {config.n_embd}), batch {batch}x{config.block_size}"
    return Workload(name, make, tokens[:, :-1], tokens[:, 1:], loss)


def recipe(level: str = "O1", fp8_format: str = "HYBRID") -> FP8RecipeKwargs:
    return FP8RecipeKwargs(backend="native", optimization_level=level, fp8_format=fp8_format)


def accel_step(work: Workload, precision: str, handlers: Sequence[Any] = ()) -> tuple[Step, Accelerator]:
    """A training step through the Accelerator, as a user's script runs it."""
    accelerator = Accelerator(mixed_precision=precision, kwarg_handlers=list(handlers))
    model = work.make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4))

    def step() -> float:
        loss = work.loss(model(work.inputs), work.targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step, accelerator


def plain_step(model: nn.Module, work: Workload, after_backward: Callable[[], None] = lambda: None) -> Step:
    """A hand-written training step (fp32, or a model converted by hand)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> float:
        loss = work.loss(model(work.inputs), work.targets)
        loss.backward()
        after_backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def gemms_only_step(work: Workload) -> Step:
    """Float8Linear's FP8 GEMMs on float32 weights and gradients: the cost of FP8 compute alone."""
    model = work.make_model()
    config = Float8Config(scaling="delayed", count_stats=True)
    convert_linears(model, make_layer=lambda linear: Float8Linear.from_linear(linear, config))
    group = scaler_group(model)

    def end_of_backward() -> None:
        bool(group.found_nonfinite())
        group.update()

    return plain_step(model, work, end_of_backward)


def torchao_step(work: Workload) -> Step | None:
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError as error:  # pragma: no cover - torchao is optional
        print(f"torchao not available: {error}")
        return None
    model = work.make_model()
    convert_to_float8_training(model, module_filter_fn=lambda module, name: _aligned(module))
    step = plain_step(model, work)

    def without_onednn() -> float:
        with onednn(False):
            return step()

    return without_onednn


def _aligned(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


@contextlib.contextmanager
def onednn(enabled: bool) -> Iterator[None]:
    previous = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(enabled)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(previous)


# --------------------------------------------------------------------------- speed
@dataclass
class Timing:
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def speed_variants(work: Workload) -> dict[str, Step]:
    variants = {
        "fp32": plain_step(work.make_model(), work),
        "native FP8 O1 (default recipe)": accel_step(work, "fp8", [recipe("O1")])[0],
        "native FP8 O2": accel_step(work, "fp8", [recipe("O2")])[0],
        "FP8 GEMMs alone (no O1/O2 storage)": gemms_only_step(work),
    }
    torchao = torchao_step(work)
    if torchao is not None:
        variants["torchao float8 tensorwise (eager)"] = torchao
    return variants


def measure(variants: dict[str, Step], reps: int, warmup: int) -> dict[str, Timing]:
    """Warm every variant up, then run them interleaved, one step each per repetition."""
    for step in variants.values():
        for _ in range(warmup):
            step()
    timings = {name: Timing() for name in variants}
    for _ in range(reps):
        for name, step in variants.items():
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            timings[name].wall_ms.append((time.perf_counter() - wall) * 1e3)
            timings[name].cpu_ms.append((time.process_time() - cpu) * 1e3)
    return timings


def speed_rows(work: Workload, reps: int, warmup: int) -> list[dict[str, Any]]:
    timings = measure(speed_variants(work), reps, warmup)
    medians = {name: (statistics.median(t.wall_ms), statistics.median(t.cpu_ms)) for name, t in timings.items()}
    base_wall, base_cpu = medians["fp32"]
    native_wall, _ = medians["native FP8 O1 (default recipe)"]
    return [
        {
            "workload": work.name, "variant": name, "wall_ms": round(wall, 1), "vs_fp32": round(wall / base_wall, 2),
            "cpu_ms": round(cpu, 1), "cpu_vs_fp32": round(cpu / base_cpu, 2),
            "time_vs_native_O1": round(wall / native_wall, 2), "reps": reps,
        }
        for name, (wall, cpu) in medians.items()
    ]


# --------------------------------------------------------------------------- memory
def tensor_bytes(value: Any) -> tuple[int, int]:
    """(bytes of tensors with elements beyond one, bytes of 0-dim/1-element tensors) in ``value``."""
    if isinstance(value, torch.Tensor):
        size = value.numel() * value.element_size()
        return (0, size) if value.numel() <= 1 else (size, 0)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        parts = [tensor_bytes(item) for item in value]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    return 0, 0


def held_bytes(params: Sequence[nn.Parameter], optimizer: torch.optim.Optimizer, accelerator: Accelerator) -> dict[str, int]:
    """Bytes of weights, gradients and optimizer state of ``params``, and of their per-tensor scalars."""
    compact = getattr(accelerator.precision, "_compact_by_id", {})
    totals = {"weights": 0, "gradients": 0, "optimizer_state": 0, "scalars": 0}
    for param in params:
        totals["weights"] += param.numel() * param.element_size()
        part = compact.get(id(param))
        if part is not None:
            big, small = tensor_bytes([part.grad.data, part.grad.scale_inv, part.grad.step_amax, part.storage.scale_inv])
        else:
            big, small = tensor_bytes(param.grad)
        totals["gradients"] += big
        totals["scalars"] += small
        big, small = tensor_bytes(optimizer.state.get(param, {}))
        totals["optimizer_state"] += big
        totals["scalars"] += small
    return totals


def memory_row(work: Workload, label: str, precision: str, handlers: Sequence[Any]) -> dict[str, Any]:
    """Train two steps, then run forward and backward: gradients and state are all held now."""
    accelerator = Accelerator(mixed_precision=precision, kwarg_handlers=list(handlers))
    model = work.make_model()
    names = {f"{name}.{p}" for name, m in model.named_modules() if _aligned(m) for p in ("weight", "bias")}
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    for index in range(3):
        accelerator.backward(work.loss(model(work.inputs), work.targets))
        if index < 2:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    params = [p for name, p in model.named_parameters() if name in names]
    count = sum(p.numel() for p in params)
    totals = held_bytes(params, optimizer.optimizer, accelerator)
    values = totals["weights"] + totals["gradients"] + totals["optimizer_state"]
    row: dict[str, Any] = {"workload": work.name, "setup": label, "parameters": count}
    row.update({f"{key}_per_param": round(value / count, 4) for key, value in totals.items()})
    row["bytes_per_param"] = round((values + totals["scalars"]) / count, 4)
    return row


def memory_rows(works: Sequence[Workload]) -> list[dict[str, Any]]:
    setups = [("fp32 AdamW", "no", []), ("native FP8 O1", "fp8", [recipe("O1")]), ("native FP8 O2", "fp8", [recipe("O2")])]
    return [memory_row(work, label, precision, handlers) for work in works for label, precision, handlers in setups]


# --------------------------------------------------------------------------- accuracy
ACCURACY_SETUPS: dict[str, tuple[str, list[Any]]] = {
    "fp32": ("no", []),
    "FP8 HYBRID O1": ("fp8", [recipe("O1", "HYBRID")]),
    "FP8 HYBRID O2": ("fp8", [recipe("O2", "HYBRID")]),
    "FP8 E4M3 O1": ("fp8", [recipe("O1", "E4M3")]),
    "FP8 E4M3 O2": ("fp8", [recipe("O2", "E4M3")]),
}


def train_losses(config: GPTConfig, precision: str, handlers: list[Any], steps: int, batch: int, seed: int) -> list[float]:
    """Per-step training loss of the example GPT, trained as examples/train_gpt.py trains it."""
    from train_gpt import lm_loss, param_groups, warmup_cosine

    torch.manual_seed(seed)
    model = GPT(config)
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-3, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(min(50, steps // 6), steps))
    train_set, _ = build_datasets(config.block_size, seed=seed)
    loader = torch.utils.data.DataLoader(
        train_set, batch_size=batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(seed)
    )
    accelerator = Accelerator(mixed_precision=precision, kwarg_handlers=handlers)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses: list[float] = []
    for x, y in loader:
        loss = lm_loss(model(x), y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if len(losses) == steps:
            break
    return losses


def accuracy_runs(config: GPTConfig, steps: int, batch: int, seed: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    curves, seconds = {}, {}
    for name, (precision, handlers) in ACCURACY_SETUPS.items():
        start = time.perf_counter()
        curves[name] = train_losses(config, precision, handlers, steps, batch, seed)
        seconds[name] = time.perf_counter() - start
        print(f"  {name}: final loss {final_loss(curves[name]):.4f} ({seconds[name]:.0f} s)", flush=True)
    return curves, seconds


def final_loss(losses: Sequence[float], window: int = 20) -> float:
    return statistics.fmean(losses[-window:])


def accuracy_rows(curves: dict[str, list[float]], seconds: dict[str, float]) -> list[dict[str, Any]]:
    base = final_loss(curves["fp32"])
    return [
        {
            "setup": name, "steps": len(losses), "first_loss": round(losses[0], 4),
            "final_loss_last20": round(final_loss(losses), 4),
            "vs_fp32_percent": round(100 * (final_loss(losses) / base - 1), 2),
            "seconds": round(seconds[name], 1),
        }
        for name, losses in curves.items()
    ]


def plot_curves(curves: dict[str, list[float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for name, losses in curves.items():
        smooth = [statistics.fmean(losses[max(0, i - 9): i + 1]) for i in range(len(losses))]
        axes.plot(range(1, len(losses) + 1), smooth, label=name, linewidth=1.2)
    axes.set(xlabel="step", ylabel="training loss (mean of 10 steps)", title="Example GPT: fp32 vs native FP8")
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# --------------------------------------------------------------------------- output
def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    headers = list(rows[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(row[h]) for h in headers) + " |" for row in rows]
    return "\n".join(lines)


def environment() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"torch {torch.__version__}, {torch.get_num_threads()} threads, {cpu}, Python {platform.python_version()}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=_ROOT / "benchmarks" / "out" / "fp8")
    parser.add_argument("--quick", action="store_true", help="small shapes and few steps: a smoke run")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per variant (MLP); GPT gets 3x")
    parser.add_argument("--steps", type=int, default=300, help="training steps of the accuracy runs")
    parser.add_argument("--batch_size", type=int, default=32, help="GPT batch (sequences)")
    parser.add_argument("--n_layer", type=int, default=GPTConfig.n_layer)
    parser.add_argument("--n_embd", type=int, default=GPTConfig.n_embd)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.reps, args.steps = 2, 12
    return args


SECTIONS = {
    "speed": ("speed.csv", "Speed (one training step, medians)"),
    "memory": ("memory.csv", "Memory (bytes per parameter of the converted layers, after backward)"),
    "accuracy": ("accuracy.csv", "Accuracy (example GPT; final loss = mean of the last 20 steps)"),
}


def write_report(out: Path) -> None:
    """report.md from every part's CSV in ``out``: a rerun of one part updates its section only."""
    parts = [f"# FP8 benchmark\n\n{environment()}"]
    for file, title in SECTIONS.values():
        if (out / file).exists():
            with (out / file).open() as handle:
                parts.append(f"## {title}\n\n" + markdown_table(list(csv.DictReader(handle))))
    if (out / "loss_curves.png").exists():
        parts.append("![loss curves](loss_curves.png)")
    (out / "report.md").write_text("\n\n".join(parts) + "\n")


def run_part(part: str, args: argparse.Namespace, config: GPTConfig, works: list[Workload]) -> list[dict[str, Any]]:
    if part == "speed":
        return speed_rows(works[0], args.reps, 2) + speed_rows(works[1], 3 * args.reps, 3)
    if part == "memory":
        return memory_rows(works)
    curves, seconds = accuracy_runs(config, args.steps, args.batch_size, args.seed)
    write_csv([{"step": i + 1, **{n: c[i] for n, c in curves.items()}} for i in range(args.steps)], args.out / "loss_curves.csv")
    plot_curves(curves, args.out / "loss_curves.png")
    return accuracy_rows(curves, seconds)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    config = GPTConfig(n_layer=args.n_layer, n_embd=args.n_embd)
    dim = 256 if args.quick else 2048
    works = [mlp_workload(dim, dim), gpt_workload(config, args.batch_size)]
    print(environment(), flush=True)
    for part in args.parts:
        rows = run_part(part, args, config, works)
        write_csv(rows, args.out / SECTIONS[part][0])
        print(markdown_table(rows), flush=True)
    write_report(args.out)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
