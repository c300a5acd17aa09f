"""QLoRA (peft LoRA on bitsandbytes 4-bit bases) on 1 process against FSDP2 over N processes: bytes per
process and the loss after the same steps.

    python benchmarks/qlora_fsdp.py [--processes 2] [--steps 20] [--hidden 256] [--layers 4]

Runs itself under `accel launch --cpu` twice (1 process without FSDP, N processes with FSDP2 wrapping
each LlamaDecoderLayer) on a Llama built from its config (no download), LoRA r=8 on every Linear of the
blocks, BitsandbytesKwargs(mode="nf4-dq", dtype=torch.float32), lm_head kept in float32, AdamW. Both
runs see the same global batch each step (N processes take 1/N of it each). Prints one table: per
process, the bytes of the quantized bases (packed 4-bit weights; their quant state, which every process
holds whole), of the LoRA parameters, of their AdamW state and of the other parameters (embeddings,
norms, lm_head: frozen, sharded too), counted from the tensors each process holds after the last step;
and the loss of the last step of each run, with their relative difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve()
ROWS = 8
KINDS = ("packed 4-bit bases", "quant state", "LoRA parameters", "AdamW state", "other parameters")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="processes of the FSDP2 run (default 2)")
    parser.add_argument("--steps", type=int, default=20, help="training steps of both runs (default 20)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size of the Llama (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    one = launch(1, args)
    many = launch(args.processes, args)
    print(table(one, many, args.steps))
    return 0


def launch(processes: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run the worker on `processes` processes; rank 0's report (bytes of every rank, losses)."""
    command = [sys.executable, "-m", "accel", "launch", "--num_processes", str(processes), "--cpu", str(HERE),
               "--worker", "--steps", str(args.steps), "--hidden", str(args.hidden), "--layers", str(args.layers)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the {processes}-process run failed:\n{done.stderr[-3000:]}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("QLORA "))
    return dict(json.loads(line[len("QLORA "):]))


def build_model(hidden: int, layers: int) -> Any:
    import peft
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return peft.get_peft_model(LlamaForCausalLM(config), peft.LoraConfig(r=8, lora_alpha=16, target_modules=targets,
                                                                         lora_dropout=0.0))


def worker(args: argparse.Namespace) -> int:
    from accel import Accelerator, BitsandbytesKwargs
    from accel.utils import FullyShardedDataParallelPlugin, gather_object

    quantization = BitsandbytesKwargs(mode="nf4-dq", dtype=torch.float32, ignore_modules=["*lm_head"])
    plugin = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # one process: the plain QLoRA run
        plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
                                                transformer_cls_names_to_wrap=["LlamaDecoderLayer"])
    accelerator = Accelerator(cpu=True, kwarg_handlers=[quantization], fsdp_plugin=plugin)
    model = accelerator.prepare(build_model(args.hidden, args.layers))
    model.train()
    optimizer = accelerator.prepare(torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3))
    rank, size = accelerator.process_index, accelerator.num_processes
    ids = torch.randint(0, 512, (ROWS, 64), generator=torch.Generator().manual_seed(1))[rank * ROWS // size:
                                                                                        (rank + 1) * ROWS // size]
    losses = []
    for _ in range(args.steps):  # the same batch every step: the loss falls as the adapters fit it
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    held = gather_object([held_bytes(model, optimizer)])
    if accelerator.is_main_process:
        print("QLORA " + json.dumps({"processes": size, "bytes": held, "losses": losses}), flush=True)
    accelerator.end_training()
    return 0


def held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this process holds of each kind (a sharded tensor counts its local shard only)."""
    import bitsandbytes as bnb

    def local(tensor: torch.Tensor) -> int:
        inner = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        return inner.numel() * inner.element_size()

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    bases = {id(m.weight) for m in layers}
    params = list(model.parameters())
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor) and t.dim()]
    return {
        KINDS[0]: sum(local(p) for p in params if id(p) in bases),
        KINDS[1]: sum(local(t) for m in layers for t in m.quant_state.as_dict(packed=True).values()),
        KINDS[2]: sum(local(p) for p in params if p.requires_grad),
        KINDS[3]: sum(local(t) for t in state),
        KINDS[4]: sum(local(p) for p in params if not p.requires_grad and id(p) not in bases),
    }


def table(one: dict[str, Any], many: dict[str, Any], steps: int) -> str:
    """The markdown table: bytes per process of each kind, 1 process against N, and the last losses."""
    n = many["processes"]
    lines = [f"| per process | 1 process | {n} processes (FSDP2), each | ratio |", "|---|---:|---:|---:|"]
    for kind in (*KINDS, "total"):
        single = _bytes(one["bytes"][0], kind)
        ranks = [_bytes(held, kind) for held in many["bytes"]]
        shown = " / ".join(f"{b:,}" for b in ranks) if len(set(ranks)) > 1 else f"{ranks[0]:,}"
        lines.append(f"| {kind} | {single:,} | {shown} | {max(ranks) / single:.2f} |")
    a, b = one["losses"][-1], many["losses"][-1]
    lines.append("")
    lines.append(f"loss after {steps} steps: 1 process {a:.9g} (from {one['losses'][0]:.4f}), {n} processes "
                 f"{b:.9g}; relative difference {abs(a - b) / abs(a):.1e}")
    return "\n".join(lines)


def _bytes(held: dict[str, int], kind: str) -> int:
    return sum(held.values()) if kind == "total" else held[kind]


if __name__ == "__main__":
    sys.exit(main())
