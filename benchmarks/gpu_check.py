"""GPU check for accel's FP8: does each FP8 backend train on this GPU, and how does it compare with bf16?

accel's FP8 GPU paths were written against the libraries' sources and tested on a CPU (the
native backend on torch's CPU float8 path, TransformerEngine and MS-AMP through stand-ins);
this script is what runs them on a real GPU. It

1. multiplies two FP8 matrices with the real ``torch._scaled_mm`` and compares with float32;
2. trains the example GPT (examples/gpt.py, the model of examples/train_gpt.py) for --steps
   steps, same seed and batches, in bf16 mixed precision (the reference) and in FP8 with each
   backend that can run here: native (O1 and O2), ao (torchao), te (TransformerEngine) and
   msamp (MS-AMP) where installed, all with the default bf16 base;
3. prints one table: final loss (mean of the last steps) and its difference from bf16's,
   median step time, peak GPU memory, and a verdict per row. A backend that cannot run here
   is listed with the reason; a failure is listed with its error and makes the exit status 1,
   as does a final loss further than --tolerance (relative) from bf16's.

    python benchmarks/gpu_check.py                           # on a CUDA GPU: 300 steps per row
    python benchmarks/gpu_check.py --json gpu_check.json     # also write the rows as JSON
    python benchmarks/gpu_check.py --device cpu --steps 4 --n_layer 1 --n_embd 32 --batch_size 4 --block_size 16

The last line is the smoke run the test suite does on a CPU (tests/benchmarks/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

_ROOT = Path(__file__).resolve().parent.parent
for _path in (_ROOT / "examples", _ROOT / "benchmarks", _ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _timing import format_table  # noqa: E402
from gpt import GPT, GPTConfig, build_datasets  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402
from accel.backends.fp8.choice import fp8_backend_status  # noqa: E402


@dataclass(frozen=True)
class Variant:
    """One row: a precision, and for FP8 the backend and recipe fields."""

    name: str
    mixed_precision: str
    recipe: dict[str, Any] = field(default_factory=dict)

    @property
    def backend(self) -> str | None:
        return self.recipe.get("backend")


VARIANTS: tuple[Variant, ...] = (
    Variant("bf16", "bf16"),
    Variant("fp8 native O1", "fp8", {"backend": "native", "optimization_level": "O1"}),
    Variant("fp8 native O2", "fp8", {"backend": "native", "optimization_level": "O2"}),
    Variant("fp8 ao", "fp8", {"backend": "ao"}),
    Variant("fp8 te", "fp8", {"backend": "te"}),
    Variant("fp8 msamp O2", "fp8", {"backend": "msamp", "optimization_level": "O2"}),
)
REFERENCE = "bf16"


@dataclass
class Row:
    """What one variant did: 'ok', 'loss off', 'skipped' or 'FAILED', with numbers where it trained."""

    name: str
    verdict: str = "ok"
    final_loss: float | None = None
    loss_vs_bf16: float | None = None
    step_ms: float | None = None
    peak_mib: float | None = None
    detail: str = ""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda",
                        help="cuda (default; pick the GPU with CUDA_VISIBLE_DEVICES) or cpu for a smoke run")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per row")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--block_size", type=int, default=64)
    parser.add_argument("--n_layer", type=int, default=4)
    parser.add_argument("--n_head", type=int, default=4)
    parser.add_argument("--n_embd", type=int, default=256, help="a multiple of 16")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(v.name for v in VARIANTS),
                        help="comma-separated row names (default: all)")
    parser.add_argument("--tolerance", type=float, default=0.1,
                        help="largest relative difference of an FP8 row's final loss from bf16's that passes")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    known = {v.name for v in VARIANTS}
    unknown = [n for n in args.variants.split(",") if n not in known]
    if unknown:
        parser.error(f"--variants: {', '.join(map(repr, unknown))} unknown; accepted: {', '.join(sorted(known))}")
    if args.steps < 1:
        parser.error(f"--steps={args.steps}: must be at least 1")
    return args


def check_device(name: str) -> torch.device:
    """The device asked for, or a SystemExit saying why it cannot be used."""
    if name not in ("cuda", "cpu"):
        raise SystemExit(f"--device {name} is not supported; accepted: cuda (the GPU the Accelerator picks; "
                         "choose it with CUDA_VISIBLE_DEVICES) or cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: torch sees no CUDA GPU here; run on a GPU machine, or --device cpu "
                         "for a smoke run")
    return torch.device(name, 0) if name == "cuda" else torch.device(name)


def scaled_mm_check(device: torch.device) -> Row:
    """The real torch._scaled_mm on E4M3 operands against the float32 product of the same values."""
    row = Row("torch._scaled_mm e4m3")
    try:
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(64, 128, generator=generator).to(device)
        b = torch.randn(32, 128, generator=generator).to(device)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        start = time.perf_counter()
        out = torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
        _sync(device)
        row.step_ms = (time.perf_counter() - start) * 1e3
        exact = a8.float() @ b8.float().t()
        error = float((out - exact).norm() / exact.norm())
        row.detail = f"relative error {error:.1e} against float32 on the same FP8 values"
        row.verdict = "ok" if error < 1e-2 else "FAILED"
    except Exception as error:  # the check reports, it does not stop
        row.verdict, row.detail = "FAILED", _brief(error)
    return row


def make_batches(args: argparse.Namespace, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same --steps batches of (input, target) windows of the corpus for every row."""
    train, _ = build_datasets(args.block_size)
    generator = torch.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(args.steps):
        index = torch.randint(len(train), (args.batch_size,), generator=generator).tolist()
        pairs = [train[i] for i in index]
        batches.append(tuple(torch.stack(part).to(device) for part in zip(*pairs)))
    return batches  # type: ignore[return-value]


def unavailable(variant: Variant, device: torch.device) -> str | None:
    """Why this variant cannot run on `device`, or None."""
    if variant.backend is None:
        return None
    return fp8_backend_status(device).get(variant.backend)


def train_row(variant: Variant, args: argparse.Namespace, batches: Sequence[Any], device: torch.device) -> Row:
    """Train the example GPT for the batches in this variant's precision; time every step."""
    row = Row(variant.name)
    reason = unavailable(variant, device)
    if reason is not None:
        row.verdict, row.detail = "skipped", reason
        return row
    try:
        losses, times, peak = _train(variant, args, batches, device)
    except Exception as error:  # the check reports, it does not stop
        traceback.print_exc(file=sys.stderr)
        row.verdict, row.detail = "FAILED", _brief(error)
        return row
    tail = max(1, min(20, len(losses) // 4))
    row.final_loss = statistics.fmean(losses[-tail:])
    warm = times[min(5, len(times) - 1):]
    row.step_ms = statistics.median(warm) * 1e3
    row.peak_mib = None if peak is None else peak / 2**20
    if not all(map(_finite, losses)):
        row.verdict, row.detail = "FAILED", "the loss became inf or NaN"
    return row


def _train(variant: Variant, args: argparse.Namespace, batches: Sequence[Any], device: torch.device
           ) -> tuple[list[float], list[float], int | None]:
    handlers = [FP8RecipeKwargs(**variant.recipe)] if variant.mixed_precision == "fp8" else []
    accelerator = Accelerator(mixed_precision=variant.mixed_precision, cpu=device.type == "cpu",
                              kwarg_handlers=handlers)
    torch.manual_seed(args.seed)
    config = GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    device = accelerator.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for inputs, targets in batches:
        inputs, targets = inputs.to(device), targets.to(device)  # no-ops: the batches are made on this device
        start = time.perf_counter()
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # syncs the device: the step is timed to completion
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    accelerator.end_training()
    return losses, times, peak


def compare(rows: list[Row], tolerance: float) -> None:
    """Each FP8 row's final loss against bf16's; beyond `tolerance` (relative) the row fails."""
    reference = next((r.final_loss for r in rows if r.name == REFERENCE), None)
    for row in rows:
        if row.final_loss is None or reference is None or row.name == REFERENCE:
            continue
        row.loss_vs_bf16 = row.final_loss / reference - 1
        if row.verdict == "ok" and abs(row.loss_vs_bf16) > tolerance:
            row.verdict = "loss off"
            row.detail = f"final loss {row.loss_vs_bf16:+.1%} from bf16's (tolerance {tolerance:.0%})"


def render(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table."""
    def number(value: float | None, pattern: str) -> str:
        return "-" if value is None else pattern.format(value)

    table = [
        [r.name, r.verdict, number(r.final_loss, "{:.4f}"), number(r.loss_vs_bf16, "{:+.2%}"),
         number(r.step_ms, "{:.1f}"), number(r.peak_mib, "{:.0f}"), r.detail]
        for r in rows
    ]
    return format_table(["row", "verdict", "final loss", "vs bf16", "step ms", "peak MiB", "detail"], table)


def environment(device: torch.device) -> str:
    """One line: torch, the device, and the FP8 libraries' versions."""
    gpu = "CPU " + platform.processor() if device.type == "cpu" else (
        f"{torch.cuda.get_device_name(device)} (sm_{''.join(map(str, torch.cuda.get_device_capability(device)))}, "
        f"CUDA {torch.version.cuda})")
    libraries = []
    for module in ("torchao", "transformer_engine", "msamp"):
        try:
            libraries.append(f"{module} {getattr(__import__(module), '__version__', '?')}")
        except Exception:  # not installed, or fails to import: both mean "not here"
            libraries.append(f"{module} -")
    return f"torch {torch.__version__} on {gpu}; {', '.join(libraries)}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = check_device(args.device)
    print(environment(device), flush=True)
    chosen = [v for v in VARIANTS if v.name in args.variants.split(",")]
    batches = make_batches(args, device)
    rows = [scaled_mm_check(device)]
    for variant in chosen:
        print(f"training {variant.name} for {args.steps} steps ...", flush=True)
        rows.append(train_row(variant, args, batches, device))
    compare(rows, args.tolerance)
    print(render(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": environment(device), "args": vars(args),
                                               "rows": [asdict(r) for r in rows]}, indent=2))
    failed = [r.name for r in rows if r.verdict in ("FAILED", "loss off")]
    print("all rows that could run passed" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")


def _brief(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


if __name__ == "__main__":
    raise SystemExit(main())
