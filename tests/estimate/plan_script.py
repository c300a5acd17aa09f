"""Launched by test_plan.py: a tiny Llama trained one step under a tensor-parallel layout; each rank reports what
it holds (measure.held_bytes) and its parameters' local shapes, to compare with the plan made in one process.

argv: dp_shard_size tp_size precision
"""

from __future__ import annotations

import sys

import torch
from launching import report
from torch import nn

from accel import Accelerator
from accel.estimate.measure import held_bytes
from accel.parallelism_config import ParallelismConfig


def tiny_llama() -> nn.Module:
    """Odd sizes where FSDP2 pads (66 tokens: 33 rows a tp rank, 17 a shard), heads tp can split."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=72, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=66,
                                        max_position_embeddings=32, tie_word_embeddings=False))


def main(dp_shard: int, tp: int, precision: str) -> None:
    from accel.fsdp import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2) if dp_shard > 1 else None
    accelerator = Accelerator(cpu=True, mixed_precision=precision, fsdp_plugin=plugin,
                              parallelism_config=ParallelismConfig(dp_shard_size=dp_shard, tp_size=tp))
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    ids = torch.randint(0, 66, (2, 8), generator=torch.Generator().manual_seed(1))
    with accelerator.autocast():
        loss = model(input_ids=ids, labels=ids).loss
    accelerator.backward(loss)
    optimizer.step()
    held = held_bytes(model, [optimizer])
    report("held", [held.parameters, held.gradients, held.optimizer])
    local = {name: list(getattr(p, "to_local", lambda: p)().shape) for name, p in model.named_parameters()}
    report("shapes", local)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
