"""Tensor parallelism (TP) and FSDP2 + TP (2-D) against DDP and FSDP2: bytes per process and step time.

    python benchmarks/tensor_parallel.py [--processes 2,4] [--steps 8] [--layouts ddp,fsdp,tp,2d]

Each layout runs under `accel launch --cpu` on a small Llama built from a config (transformers, hidden 256,
4 layers, 8 heads, 4 key-value heads, vocabulary 2048: 4.98M parameters; see `make_model`), AdamW, fp32, with the same
global batch (8 sequences of 64 tokens) split over the data-parallel processes (TP's processes of one group
share theirs). It prints, per layout and process count: the bytes of parameters + gradients + AdamW state one
process holds (local shards of DTensors counted), and the median step time (forward, backward, clip, step) over
`--steps` steps after 2 warm-up steps. 2-D runs with tp=2 and dp_shard = processes / 2 (4 processes and more).
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

GLOBAL_BATCH, SEQUENCE, VOCAB = 8, 64, 2048


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="2,4", help="process counts (default 2,4)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps (default 8, after 2 warm-up)")
    parser.add_argument("--layouts", default="ddp,fsdp,tp,2d", help="layouts to run (default ddp,fsdp,tp,2d)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args.worker, args.steps)
    from _timing import format_table

    rows = []
    for processes in map(int, args.processes.split(",")):
        for layout in args.layouts.split(","):
            if layout == "2d" and processes < 4:
                continue
            result = launch(layout, processes, args.steps)
            rows.append([layout, processes, f"{result['bytes'] / 2**20:.2f}", f"{result['step_ms']:.1f}",
                         f"{result['loss']:.5f}"])
            print(rows[-1], flush=True)
    print(format_table(["layout", "processes", "MiB per process", "step ms (median)", "last loss"], rows))
    return 0


def launch(layout: str, processes: int, steps: int) -> dict[str, Any]:
    """Run the worker for `layout` on `processes` processes; what process 0 reported."""
    command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", str(processes), __file__,
               "--worker", layout, "--steps", str(steps)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{layout} on {processes} processes failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[0].removeprefix("BENCH ")))


def make_model() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=4, vocab_size=VOCAB, max_position_embeddings=SEQUENCE)
    return LlamaForCausalLM(config)


def worker(layout: str, steps: int) -> int:
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from accel import Accelerator
    from accel.parallel.tensor_strategy import TensorParallelStrategy
    from accel.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["LlamaDecoderLayer"])
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin if layout == "fsdp" else None)
    world = accelerator.num_processes
    data_rank, data_size = accelerator.process_index, world
    if layout in ("tp", "2d"):
        tp_size = world if layout == "tp" else 2
        mesh = init_device_mesh("cpu", (world // tp_size, tp_size), mesh_dim_names=("dp_shard", "tp"))
        accelerator.strategy = TensorParallelStrategy(accelerator.process_state, accelerator.precision,
                                                      accelerator.handlers, mesh, plugin if layout == "2d" else None)
        data_rank, data_size = mesh["dp_shard"].get_local_rank(), mesh["dp_shard"].size()
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    part = GLOBAL_BATCH // data_size
    times, loss = [], 0.0
    for step in range(steps + 2):
        ids = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQUENCE), generator=torch.Generator().manual_seed(step))
        ids = ids[data_rank * part:(data_rank + 1) * part]
        start = time.perf_counter()
        output = model(input_ids=ids, labels=ids)
        accelerator.backward(output.loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        if step == 0:
            held = local_bytes(model, optimizer)  # gradients present; AdamW state after the first step below
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        times.append(time.perf_counter() - start)
        loss = accelerator.reduce(output.loss.detach(), "mean").item()
    held += state_bytes(optimizer)
    if accelerator.is_main_process:
        print("BENCH " + json.dumps({"bytes": held, "step_ms": 1e3 * statistics.median(times[2:]), "loss": loss}))
    accelerator.end_training()
    return 0


def _local(tensor: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def local_bytes(model: Any, optimizer: Any) -> int:
    """Bytes of this process's parameters and gradients (its shards of DTensors)."""
    total = 0
    for parameter in model.parameters():
        for tensor in (parameter, parameter.grad):
            if tensor is not None:
                local = _local(tensor)
                total += local.numel() * local.element_size()
    return total


def state_bytes(optimizer: Any) -> int:
    """Bytes of this process's optimizer state (AdamW's two moments and step counts)."""
    import torch

    return sum(_local(v).numel() * _local(v).element_size() for state in optimizer.state.values()
               for v in state.values() if isinstance(v, torch.Tensor))


if __name__ == "__main__":
    raise SystemExit(main())
