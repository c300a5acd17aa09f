"""Sequence parallelism (Ulysses, sp_backend "torch"): activation memory per process and step time, sp=1 against sp=2.

    python benchmarks/sequence_parallel.py [--sequence 4096] [--sizes 1,2] [--steps 3]

Each sp size runs under `accel launch --cpu --num_processes <sp>` (gloo) on a Llama built from a config
(transformers, sdpa attention, hidden 256, 4 layers, 8 heads, 4 key-value heads, MLP 1024, vocabulary 2048: 4.98M
parameters), fp32, one sequence of `--sequence` tokens per step, AdamW. It prints, per sp size and for process 0:

* activation bytes: what autograd saved for backward in one forward (each storage counted once, through
  torch.autograd.graph.saved_tensors_hooks; parameters left out): the activations a step holds before backward;
* peak resident growth over the step (accel.bench.memory_use.PeakMemory: VmHWM on Linux), which adds the
  logits, the attention's temporaries and the allocator's slack;
* the bytes each process sends in the all-to-alls of one step (4 exchanges of q, k, v and the output per layer
  forward, as many backward: each sends (sp - 1) / sp of the tensor it exchanges), and the median step time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
VOCAB = 2048


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequence", type=int, default=4096, help="tokens per sequence (default 4096)")
    parser.add_argument("--sizes", default="1,2", help="sp sizes, one process each (default 1,2)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (default 3, after 1 warm-up)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args.sequence, args.steps)
    from _timing import format_table

    rows = []
    for size in map(int, args.sizes.split(",")):
        result = launch(size, args.sequence, args.steps)
        rows.append([size, args.sequence, f"{result['saved'] / 2**20:.1f}", f"{result['peak'] / 2**20:.1f}",
                     f"{result['sent'] / 2**20:.1f}", f"{result['step_ms']:.0f}", f"{result['loss']:.5f}"])
        print(rows[-1], flush=True)
    print(format_table(["sp", "tokens", "activations MiB", "peak growth MiB", "all-to-all MiB sent", "step ms",
                        "loss"], rows))
    return 0


def launch(size: int, sequence: int, steps: int) -> dict[str, Any]:
    """Run the worker on `size` processes; what process 0 reported."""
    command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", str(size)]
    if size > 1:
        command += ["--parallelism_config_sp_size", str(size)]
    command += [__file__, "--worker", "--sequence", str(sequence), "--steps", str(steps)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"sp={size} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[0].removeprefix("BENCH ")))


def make_model(sequence: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=4, vocab_size=VOCAB, max_position_embeddings=sequence,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def saved_bytes(run: Any, model: Any) -> tuple[Any, int]:
    """`run()`'s result and the bytes autograd saved for backward while it ran (each storage once; the model's
    parameters, which backward also keeps, left out: they are not activations)."""
    import torch

    weights = {parameter.untyped_storage().data_ptr() for parameter in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: Any) -> Any:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = run()
    return result, sum(seen.values())


def all_to_all_bytes(model: Any, sequence: int, size: int) -> int:
    """Bytes one process sends in one step's all-to-alls (module docstring)."""
    config = model.config
    head = config.hidden_size // config.num_attention_heads
    local = sequence // size
    per_layer = local * head * (2 * config.num_attention_heads + 2 * config.num_key_value_heads) * 4  # q, out, k, v
    return 2 * config.num_hidden_layers * per_layer * (size - 1) // size


def worker(sequence: int, steps: int) -> int:
    import torch

    from accel import Accelerator
    from accel.bench.memory_use import PeakMemory

    accelerator = Accelerator(cpu=True)
    model = make_model(sequence)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, VOCAB, (steps + 1, sequence))], batch_size=1
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    size = accelerator.sequence_parallel.ranks if accelerator.sequence_parallel else 1
    peak, times, saved, grown, loss = PeakMemory(accelerator.device), [], 0, 0, 0.0
    for step, batch in enumerate(loader):
        peak.start()
        start = time.perf_counter()
        output, saved = saved_bytes(lambda: model(**batch), model)  # noqa: B023 - called at once
        accelerator.backward(output.loss)
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
        grown = max(grown, peak.stop() or 0) if step else 0
        loss = output.loss.item()
    if accelerator.is_main_process:
        report = {"saved": saved, "peak": grown, "sent": all_to_all_bytes(accelerator.unwrap_model(model), sequence, size),
                  "step_ms": 1e3 * statistics.median(times[1:]), "loss": loss}
        print("BENCH " + json.dumps(report))
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
