"""FP8 on a transformers Llama: fp32 vs bf16 vs native FP8 with an fp32 and a bf16 base.

A tiny LlamaForCausalLM (2 layers, width 256, 4 heads, MLP 688, vocabulary 96) learns the
character corpus of examples/gpt.py, batch 8x64, AdamW 1e-3, the same seed and batches in every
row. Rows: fp32 (``mixed_precision="no"``), bf16 mixed, and ``mixed_precision="fp8"`` with
``FP8RecipeKwargs(backend="native", base_precision=...)`` for base fp32 and bf16.

On a CPU without native bfloat16 matrix instructions (AVX512-BF16 or AMX-BF16) torch emulates
bf16 products, about 100x slower than fp32: the rows that compute in bf16 then run
--steps_16bit steps (default 3) instead of --steps. The table gives, per row, the median step
time, wall and process CPU (the first step, which warms up, left out), the loss at the step every row reached (same
batch: comparable), and the loss at the row's own last step.

    python benchmarks/fp8_llama.py                     # about 2 minutes on 2 cores of an AVX2-only CPU
    python benchmarks/fp8_llama.py --steps 40 --steps_16bit 40 --json llama.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

_ROOT = Path(__file__).resolve().parent.parent
for _path in (_ROOT / "examples", _ROOT / "benchmarks", _ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _timing import format_table  # noqa: E402
from gpt import build_datasets  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402

ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("fp32", "no", None),
    ("bf16 mixed", "bf16", None),
    ("fp8 native, base fp32", "fp8", "fp32"),
    ("fp8 native, base bf16", "fp8", "bf16"),
)
"""(row name, mixed_precision, FP8 base_precision)."""


@dataclass
class Result:
    name: str
    steps: int
    step_s: float
    cpu_s: float
    """Process CPU time per step (all threads): steadier than wall time when other work shares the cores."""
    losses: list[float]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=16, help="steps of the rows that compute in fp32")
    parser.add_argument("--steps_16bit", type=int, default=None,
                        help="steps of the rows that compute in bf16 (default: 3 on a CPU without native bf16, "
                             "else --steps)")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    for name in ("steps", "steps_16bit"):
        value = getattr(args, name)
        if value is not None and value < 2:
            parser.error(f"--{name}={value}: must be at least 2 (the first step warms up and is not timed)")
    return args


def cpu_description() -> tuple[str, bool]:
    """(CPU model and its 16-bit matrix flags, whether it multiplies bf16 natively)."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:  # not Linux: the model stays unknown
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")
    present = [f for f in wanted if f in flags] or ["none of " + ", ".join(wanted)]
    native_bf16 = bool(flags & {"avx512_bf16", "amx_bf16"})
    return f"{model} ({torch.get_num_threads()} threads; flags: {', '.join(present)})", native_bf16


def batches(args: argparse.Namespace, count: int) -> list[torch.Tensor]:
    """`count` batches of token windows of the character corpus, the same for every row."""
    train, _ = build_datasets(args.seq_len)
    generator = torch.Generator().manual_seed(0)
    picks = [torch.randint(len(train), (args.batch_size,), generator=generator).tolist() for _ in range(count)]
    return [torch.stack([train[i][0] for i in pick]) for pick in picks]


def llama(width: int = 256) -> Any:
    """The tiny Llama (width 256, MLP 688); ``width`` scales both (MLP ``width * 688 / 256``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=96, hidden_size=width, intermediate_size=width * 688 // 256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def run_row(name: str, mixed_precision: str, base: str | None, data: Sequence[torch.Tensor]) -> Result:
    handlers = [] if base is None else [FP8RecipeKwargs(backend="native", base_precision=base)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "bf16 will be slow here" warning: this script measures exactly that
        accelerator = Accelerator(mixed_precision=mixed_precision, cpu=True, kwarg_handlers=handlers)
    model = llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses, times, cpu = [], [], []
    for tokens in data:
        start, start_cpu = time.perf_counter(), time.process_time()
        loss = model(input_ids=tokens, labels=tokens).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    accelerator.end_training()
    return Result(name, len(data), statistics.median(times[1:]), statistics.median(cpu[1:]), losses)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu, native_bf16 = cpu_description()
    steps_16bit = args.steps_16bit or (args.steps if native_bf16 else 3)
    print(f"torch {torch.__version__}; {cpu}", flush=True)
    data = batches(args, max(args.steps, steps_16bit))
    results = []
    for name, mixed_precision, base in ROWS:
        in_16bit = mixed_precision == "bf16" or base == "bf16"
        steps = steps_16bit if in_16bit else args.steps
        print(f"{name}: {steps} steps ...", flush=True)
        results.append(run_row(name, mixed_precision, base, data[:steps]))
    common = min(r.steps for r in results)
    rows = [[r.name, r.steps, f"{r.step_s:.2f}", f"{r.cpu_s:.2f}", f"{r.losses[common - 1]:.4f}", f"{r.losses[-1]:.4f}"]
            for r in results]
    headers = ["row", "steps", "wall s / step", "CPU s / step", f"loss at step {common}", "loss at last step"]
    print(format_table(headers, rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu, "torch": torch.__version__, "common_step": common,
                                               "rows": [asdict(r) for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
