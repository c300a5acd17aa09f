"""GPU check for accel's FP8: every recipe the GPU can run, against bf16 and bf16 + torch.compile.

One command fills docs/fp8.md's GPU table. It

1. multiplies two FP8 matrices with the real ``torch._scaled_mm`` and compares with float32;
2. trains a Llama-shaped model (benchmarks/_llama.py: Llama-3-8B block widths, --n_layers blocks)
   on the character corpus of examples/gpt.py, the same seed and batches in every row: bf16 mixed
   precision (the reference) and each FP8 recipe in RECIPES, by its FP8RecipeKwargs names
   (native, te, ao, msamp; scaling delayed, current, block, mxfp8, nvfp4, rowwise, ...), each
   eager and, unless --no_compile, under torch.compile (inductor), as is bf16;
3. prints one markdown table: tokens/s eager and compiled, their ratio to bf16's and to bf16 +
   compile's, the final loss (mean of the last steps) and its difference from bf16's, peak GPU
   memory, how many Linear layers ran in FP8 (the small-layer filter's default applies), and a
   verdict. A recipe that cannot run here (library missing, GPU too old, a scaling name this accel
   or the library does not know) is listed as skipped with the reason; a failure is listed with
   its error and makes the exit status 1, as does a loss further than --tolerance from bf16's.

    python benchmarks/gpu_check.py                        # on a CUDA FP8 GPU: 100 steps per row
    python benchmarks/gpu_check.py --json gpu_check.json  # also write the rows as JSON
    python benchmarks/gpu_check.py --plan                 # print the rows and why any is skipped; train nothing
    python benchmarks/gpu_check.py --cpu_smoke            # a tiny model on the CPU, eager only (the test suite's run)
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

_ROOT = Path(__file__).resolve().parent.parent
for _path in (_ROOT / "examples", _ROOT / "benchmarks", _ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _llama import Llama, LlamaShape  # noqa: E402
from gpt import build_datasets  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402
from accel.backends.fp8.choice import fp8_backend_status  # noqa: E402


@dataclass(frozen=True)
class Recipe:
    """One row: a name, and for FP8 the FP8RecipeKwargs fields (empty for the bf16 reference)."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def backend(self) -> str | None:
        return self.fields.get("backend")


SHAPES = {
    "llama3-8b": LlamaShape(),
    "small": LlamaShape(dim=256, n_heads=4, n_kv_heads=2, ffn_dim=688),
    "tiny": LlamaShape.tiny(),
}
"""--shape: the model's widths (--n_layers and --seq_len set the rest)."""
REFERENCE = Recipe("bf16")
RECIPES: tuple[Recipe, ...] = (
    REFERENCE,
    Recipe("native delayed O1", {"backend": "native", "scaling": "delayed"}),
    Recipe("native current O1", {"backend": "native", "scaling": "current"}),
    Recipe("native delayed O2", {"backend": "native", "scaling": "delayed", "optimization_level": "O2"}),
    Recipe("te delayed", {"backend": "te", "scaling": "delayed"}),
    Recipe("te current", {"backend": "te", "scaling": "current"}),
    Recipe("te block", {"backend": "te", "scaling": "block"}),
    Recipe("te mxfp8", {"backend": "te", "scaling": "mxfp8"}),
    Recipe("te nvfp4", {"backend": "te", "scaling": "nvfp4"}),
    Recipe("ao tensorwise", {"backend": "ao", "scaling": "current"}),
    Recipe("ao rowwise", {"backend": "ao", "scaling": "rowwise", "fp8_format": "E4M3"}),
    Recipe("ao rowwise_with_gw_hp", {"backend": "ao", "scaling": "rowwise_with_gw_hp", "fp8_format": "E4M3"}),
    Recipe("ao mxfp8", {"backend": "ao", "scaling": "mxfp8", "fp8_format": "E4M3"}),
    Recipe("msamp O2", {"backend": "msamp", "optimization_level": "O2", "use_autocast_during_eval": True}),
)


@dataclass
class Row:
    """What one recipe did: 'ok', 'loss off', 'skipped' or 'FAILED', with numbers where it trained."""

    name: str
    backend: str = "-"
    verdict: str = "ok"
    tokens_s: float | None = None
    vs_bf16: float | None = None
    tokens_s_compiled: float | None = None
    vs_bf16_compiled: float | None = None
    final_loss: float | None = None
    loss_vs_bf16: float | None = None
    peak_gib: float | None = None
    in_fp8: str = "-"
    detail: str = ""


@dataclass
class Run:
    """One training run: losses, step times (s) and peak memory (bytes, CUDA only), and the FP8 report."""

    losses: list[float]
    times: list[float]
    peak: int | None
    in_fp8: str


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default; pick the GPU with CUDA_VISIBLE_DEVICES) or cpu")
    parser.add_argument("--cpu_smoke", action="store_true",
                        help="tiny model on the CPU, 3 steps, eager only: checks the plan and the code paths")
    parser.add_argument("--plan", action="store_true", help="print the rows and why any is skipped; train nothing")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per row")
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--n_layers", type=int, default=2, help="blocks")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b",
                        help="the blocks' widths: llama3-8b (dim 4096, MLP 14336), small (256, 688; for a CPU), tiny")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no_compile", action="store_true", help="eager rows only")
    parser.add_argument("--recipes", default=",".join(r.name for r in RECIPES),
                        help="comma-separated row names (default: all)")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="largest relative difference of an FP8 row's final loss from bf16's that passes")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    known = {r.name for r in RECIPES}
    unknown = [n for n in args.recipes.split(",") if n not in known]
    if unknown:
        parser.error(f"--recipes: {', '.join(map(repr, unknown))} unknown; accepted: {', '.join(sorted(known))}")
    if args.steps < 2:
        parser.error(f"--steps={args.steps}: must be at least 2")
    if args.cpu_smoke:
        args.device, args.steps, args.batch_size, args.seq_len, args.no_compile = "cpu", 3, 2, 16, True
        args.shape, args.n_layers = "tiny", 1
    return args


def check_device(name: str) -> torch.device:
    """The device asked for, or a SystemExit saying why it cannot be used."""
    if name not in ("cuda", "cpu"):
        raise SystemExit(f"--device {name} is not supported; accepted: cuda (choose the GPU with "
                         "CUDA_VISIBLE_DEVICES) or cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: torch sees no CUDA GPU here; run on a GPU machine, or --cpu_smoke")
    return torch.device(name, 0) if name == "cuda" else torch.device(name)


def refusal(recipe: Recipe, device: torch.device) -> str | None:
    """Why `recipe` cannot run on `device` (its backend, or the recipe itself refused at construction), or None."""
    if recipe.backend is None:
        return None
    reason = fp8_backend_status(device).get(recipe.backend)
    if reason is not None:
        return reason
    try:
        Accelerator(mixed_precision="fp8", cpu=device.type == "cpu", kwarg_handlers=[FP8RecipeKwargs(**recipe.fields)])
    except (ValueError, TypeError, NotImplementedError, ImportError) as error:
        return _brief(error)
    return None


def scaled_mm_check(device: torch.device) -> Row:
    """The real torch._scaled_mm on E4M3 operands against the float32 product of the same values."""
    row = Row("torch._scaled_mm e4m3")
    try:
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(64, 128, generator=generator).to(device)
        b = torch.randn(32, 128, generator=generator).to(device)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        out = torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
        exact = a8.float() @ b8.float().t()
        error = float((out - exact).norm() / exact.norm())
        row.detail = f"relative error {error:.1e} against float32 on the same FP8 values"
        row.verdict = "ok" if error < 1e-2 else "FAILED"
    except Exception as error:  # the check reports, it does not stop
        row.verdict, row.detail = "FAILED", _brief(error)
    return row


def make_batches(args: argparse.Namespace, device: torch.device) -> list[torch.Tensor]:
    """--steps batches of --seq_len + 1 tokens of the corpus, the same for every row."""
    train, _ = build_datasets(args.seq_len)
    generator = torch.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(args.steps):
        index = torch.randint(len(train), (args.batch_size,), generator=generator).tolist()
        windows = [torch.cat([train[i][0], train[i][1][-1:]]) for i in index]
        batches.append(torch.stack(windows).to(device))
    return batches


def train(recipe: Recipe, compiled: bool, args: argparse.Namespace, batches: Sequence[torch.Tensor],
          device: torch.device) -> Run:
    """Train the Llama-shaped model on the batches in this recipe's precision; time every step."""
    handlers = [FP8RecipeKwargs(**recipe.fields)] if recipe.backend else []
    accelerator = Accelerator(mixed_precision="fp8" if recipe.backend else "bf16", cpu=device.type == "cpu",
                              kwarg_handlers=handlers, dynamo_backend="inductor" if compiled else None)
    torch.manual_seed(args.seed)
    shape = dataclasses.replace(SHAPES[args.shape], n_layers=args.n_layers, max_seq=args.seq_len)
    model = Llama(shape)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    report = getattr(accelerator.precision, "conversion_report", None)
    in_fp8 = "-" if report is None else f"{report.num_fp8} of {len(report.layers)}"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for tokens in batches:
        start = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # syncs the device: the step is timed to completion
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    accelerator.end_training()
    del model, optimizer, accelerator
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return Run(losses, times, peak, in_fp8)


def run_recipe(recipe: Recipe, args: argparse.Namespace, batches: Sequence[torch.Tensor], device: torch.device) -> Row:
    """The recipe's row: skipped with the reason, or trained eager (and compiled) with its numbers."""
    row = Row(recipe.name, recipe.backend or "-")
    reason = refusal(recipe, device)
    if reason is not None:
        row.verdict, row.detail = "skipped", reason
        return row
    tokens = args.batch_size * args.seq_len
    for compiled in (False,) if args.no_compile else (False, True):
        try:
            run = train(recipe, compiled, args, batches, device)
        except Exception as error:  # the check reports, it does not stop
            traceback.print_exc(file=sys.stderr)
            row.verdict = "FAILED"
            row.detail = ("compiled: " if compiled else "") + _brief(error)
            return row
        speed = tokens / statistics.median(run.times[max(1, min(10, len(run.times) // 4)):])  # warm-up left out
        if compiled:
            row.tokens_s_compiled = speed
            continue
        row.tokens_s, row.in_fp8 = speed, run.in_fp8
        row.final_loss = statistics.fmean(run.losses[-max(1, min(10, len(run.losses) // 4)):])
        row.peak_gib = None if run.peak is None else run.peak / 2**30
        if not all(loss == loss and abs(loss) != float("inf") for loss in run.losses):
            row.verdict, row.detail = "FAILED", "the loss became inf or NaN"
    return row


def compare(rows: list[Row], tolerance: float) -> None:
    """Speeds against bf16's (eager to eager, compiled to compiled) and final losses against bf16's."""
    reference = next((r for r in rows if r.name == REFERENCE.name), None)
    if reference is None:
        return
    for row in rows:
        if row is reference or row.tokens_s is None:
            continue
        row.vs_bf16 = _ratio(row.tokens_s, reference.tokens_s)
        row.vs_bf16_compiled = _ratio(row.tokens_s_compiled, reference.tokens_s_compiled)
        if row.final_loss is not None and reference.final_loss:
            row.loss_vs_bf16 = row.final_loss / reference.final_loss - 1
            if row.verdict == "ok" and abs(row.loss_vs_bf16) > tolerance:
                row.verdict = "loss off"
                row.detail = f"final loss {row.loss_vs_bf16:+.1%} from bf16's (tolerance {tolerance:.0%})"


def render(rows: Sequence[Row]) -> str:
    """The rows as a markdown table (docs/fp8.md's GPU table)."""
    def number(value: float | None, pattern: str) -> str:
        return "-" if value is None else pattern.format(value)

    header = ["recipe", "backend", "verdict", "tokens/s", "vs bf16", "tokens/s compiled", "vs bf16+compile",
              "final loss", "loss vs bf16", "peak GiB", "Linear in FP8", "detail"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r.name, r.backend, r.verdict, number(r.tokens_s, "{:,.0f}"), number(r.vs_bf16, "{:.2f}x"),
                 number(r.tokens_s_compiled, "{:,.0f}"), number(r.vs_bf16_compiled, "{:.2f}x"),
                 number(r.final_loss, "{:.4f}"), number(r.loss_vs_bf16, "{:+.2%}"), number(r.peak_gib, "{:.1f}"),
                 r.in_fp8, r.detail.replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment(device: torch.device) -> str:
    """One line: torch, the device, and the FP8 libraries' versions."""
    where = "CPU " + (platform.processor() or platform.machine()) if device.type == "cpu" else (
        f"{torch.cuda.get_device_name(device)} (sm_{''.join(map(str, torch.cuda.get_device_capability(device)))}, "
        f"CUDA {torch.version.cuda})")
    libraries = []
    for module in ("torchao", "transformer_engine", "msamp"):
        try:
            libraries.append(f"{module} {getattr(__import__(module), '__version__', '?')}")
        except Exception:  # not installed, or fails to import: both mean "not here"
            libraries.append(f"{module} -")
    return f"torch {torch.__version__} on {where}; {', '.join(libraries)}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = check_device(args.device)
    print(environment(device), flush=True)
    chosen = [r for r in RECIPES if r.name in args.recipes.split(",")]
    if args.plan:
        for recipe in chosen:
            reason = refusal(recipe, device)
            print(f"{recipe.name}: " + ("runs" if reason is None else f"skipped: {reason}"), flush=True)
        return 0
    batches = make_batches(args, device)
    rows = [scaled_mm_check(device)]
    for recipe in chosen:
        print(f"training {recipe.name} for {args.steps} steps ...", flush=True)
        rows.append(run_recipe(recipe, args, batches, device))
    compare(rows, args.tolerance)
    print(render(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": environment(device), "args": vars(args),
                                               "rows": [asdict(r) for r in rows]}, indent=2))
    failed = [r.name for r in rows if r.verdict in ("FAILED", "loss off")]
    print("all rows that could run passed" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


def _ratio(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference


def _brief(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= 200 else text[:197] + "..."


if __name__ == "__main__":
    raise SystemExit(main())
