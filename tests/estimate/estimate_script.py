"""Launched by test_training.py: train one step under a layout and report what each rank holds, and the estimate."""

from __future__ import annotations

import sys

import torch
from launching import report
from torch import nn

from accel import Accelerator
from accel.estimate.measure import held_bytes
from accel.estimate.training import training_bytes


def odd_model() -> nn.Module:
    """Odd row counts (FSDP2 pads them), a frozen layer, and an embedding tied to the head."""
    torch.manual_seed(0)
    embedding = nn.Embedding(11, 6)
    model = nn.Sequential(embedding, nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3), nn.Linear(3, 6), nn.Linear(6, 11))
    model[1].requires_grad_(False)
    model[5].weight = embedding.weight
    return model


def main(layout: str) -> None:
    plugin = parallelism = None
    if layout in ("fsdp", "hsdp"):
        from accel.fsdp import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    if layout == "hsdp":  # 4 processes: 2 groups of 2 shards
        from accel.parallelism_config import ParallelismConfig

        parallelism = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2)
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin, parallelism_config=parallelism)
    model = odd_model()
    estimate = training_bytes(model, "no", layout, accelerator.num_processes, "adamw",
                              shard_size=2 if layout == "hsdp" else None)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randint(0, 11, (4, 3))).sum())
    optimizer.step()
    held = held_bytes(model, [optimizer])
    mine = estimate[accelerator.process_index]
    report("held", [held.parameters, held.gradients, held.optimizer])
    report("estimate", [mine.parameters, mine.gradients, mine.optimizer, mine.buffers])
    if layout == "ddp":
        sizes = model._get_ddp_logging_data().get("bucket_sizes", "")
        report("buckets", sum(int(size) for size in str(sizes).split(",") if size.strip()))


if __name__ == "__main__":
    main(sys.argv[1])
