"""Step time of native FP8 (O1, O2) against fp32 and bf16 mixed, measured interleaved in one process.

Models: the transformers Llama of fp8_llama.py (2 layers, width 256, batch 8x64) and the example
GPT (4 layers, width 128, batch 32x64), AdamW, the same seed and batches in every variant. Each
round runs every variant for --steps steps in turn (fp32, bf16, O1, O2, fp32, ...), so that load
from other work on a shared machine falls on all of them alike; a round's time is the median of
its steps. Printed per variant: the min and median over rounds (wall and process CPU), each
round's ratio to bf16 mixed (min, median, max), and the loss after the last step.

On a CPU without native bf16 matrix instructions the ratios are taken against fp32, and the
16-bit variants there take about 100x longer: use --rounds 1 --steps 2. ``--float32_products``
measures what such a CPU runs on one that has them: the bf16 checks report False, so the FP8
products run in float32, and FP8 runs on base_precision='fp32' against fp32 (no bf16 variant).

    python benchmarks/fp8_speed.py                       # both models, 5 rounds of 6 steps
    python benchmarks/fp8_speed.py --model gpt --threads 1
    python benchmarks/fp8_speed.py --model llama --llama_width 1024   # wider: the GEMMs weigh more
    python benchmarks/fp8_speed.py --float32_products --threads 1     # the path of AVX2-only CPUs
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

_ROOT = Path(__file__).resolve().parent.parent
for _path in (_ROOT / "examples", _ROOT / "benchmarks", _ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from fp8_llama import llama  # noqa: E402
from gpt import GPT, GPTConfig  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402
from accel.backends.native_fp8.cpu_gemm import compute_dtype  # noqa: E402

VARIANTS: dict[str, tuple[str, str | None]] = {
    "fp32": ("no", None),
    "bf16 mixed": ("bf16", None),
    "fp8 native O1": ("fp8", "O1"),
    "fp8 native O2": ("fp8", "O2"),
}
"""name: (mixed_precision, FP8 optimization level); FP8 runs on its default base, bf16 mixed."""
FLOAT32_VARIANTS: dict[str, tuple[str, str | None]] = {
    "fp32": ("no", None),
    "fp8 native O1": ("fp8", "O1"),
    "fp8 native O2": ("fp8", "O2"),
}
"""--float32_products: FP8 on base_precision='fp32', against fp32."""


def make_step(
    model_name: str, mixed_precision: str, level: str | None, width: int = 256, base: str = "bf16"
) -> Callable[[int], float]:
    """A function running training step i (forward, backward, AdamW step, zero_grad); returns the loss."""
    handlers = [] if level is None else [FP8RecipeKwargs(backend="native", optimization_level=level, base_precision=base)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "bf16 is slow on this CPU": measured here on purpose
        accelerator = Accelerator(mixed_precision=mixed_precision, cpu=True, kwarg_handlers=handlers)
    torch.manual_seed(0)
    model, batch = (llama(width), 8) if model_name == "llama" else (GPT(GPTConfig()), 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(0)
    data = [torch.randint(96, (batch, 65), generator=generator) for _ in range(8)]

    def step(i: int) -> float:
        tokens = data[i % len(data)]
        if model_name == "llama":
            loss = model(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
        else:
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        return float(loss.detach())

    return step


def measure(model_name: str, rounds: int, steps: int, width: int = 256, float32_products: bool = False) -> None:
    variants, base = (FLOAT32_VARIANTS, "fp32") if float32_products else (VARIANTS, "bf16")
    runs = {name: make_step(model_name, *variant, width=width, base=base) for name, variant in variants.items()}
    done = dict.fromkeys(runs, 0)
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    last: dict[str, float] = {}
    for _ in range(rounds + 1):  # the first round warms up and is not kept
        for name, step in runs.items():
            gc.collect()
            times, cpu_times = [], []
            for _ in range(steps):
                start, start_cpu = time.perf_counter(), time.process_time()
                last[name] = step(done[name])
                times.append(time.perf_counter() - start)
                cpu_times.append(time.process_time() - start_cpu)
                done[name] += 1
            wall[name].append(statistics.median(times) * 1e3)
            cpu[name].append(statistics.median(cpu_times) * 1e3)
    reference = "bf16 mixed" if compute_dtype() == torch.bfloat16 else "fp32"
    shape = f" width {width}" if model_name == "llama" else ""
    print(f"\n{model_name}{shape}: {rounds} rounds of {steps} steps, ratios per round against {reference}")
    for name in runs:
        ratios = sorted(a / b for a, b in zip(wall[name][1:], wall[reference][1:]))
        print(f"  {name:14s} wall ms min {min(wall[name][1:]):7.1f} median {statistics.median(wall[name][1:]):7.1f}"
              f" | CPU ms median {statistics.median(cpu[name][1:]):7.1f}"
              f" | x {reference}: min {ratios[0]:.2f} median {statistics.median(ratios):.2f} max {ratios[-1]:.2f}"
              f" | loss after {done[name]} steps {last[name]:.4f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("llama", "gpt", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="steps per variant and round")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--llama_width", type=int, default=256, help="the Llama's width (MLP scales with it)")
    parser.add_argument(
        "--float32_products", action="store_true",
        help="pretend this CPU has no bf16 instructions (FP8 products in float32, base fp32, against fp32)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error(f"--rounds={args.rounds} and --steps={args.steps} must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.float32_products:  # before compute_dtype() first reads them (it caches its answer)
        torch.cpu._is_avx512_bf16_supported = lambda: False  # type: ignore[attr-defined]
        torch.cpu._is_amx_tile_supported = lambda: False  # type: ignore[attr-defined]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, FP8 products on the CPU in {compute_dtype()}")
    for model_name in ("llama", "gpt") if args.model == "both" else (args.model,):
        measure(model_name, args.rounds, args.steps, args.llama_width, args.float32_products)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
