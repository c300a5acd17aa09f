"""Launched by test_deepspeed_ulysses.py: a tiny transformers Llama (sdpa) trained 4 SGD steps under DeepSpeed ZeRO 1
with DeepSpeed's Ulysses over sp_size processes (`ParallelismConfig(sp_size=N, sp_backend="deepspeed")`), the loss
computed over the sequence group as Accelerate's sequence-parallelism guide does; argv: sp_size (1: one process,
the loss from the model, the reference), the learning rate."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from launching import report

sys.path.insert(0, str(Path(__file__).parents[1] / "parallel"))
from tensor_tiny import make_llama  # noqa: E402

from accel import Accelerator, ParallelismConfig  # noqa: E402
from accel.utils import DeepSpeedPlugin  # noqa: E402

sp_size = int(sys.argv[1])
parallelism = ParallelismConfig(sp_size=sp_size, sp_backend="deepspeed") if sp_size > 1 else None
plugin = DeepSpeedPlugin(zero_stage=1)
plugin.deepspeed_config["zero_allow_untested_optimizer"] = True
accelerator = Accelerator(cpu=True, deepspeed_plugin=plugin, parallelism_config=parallelism)
model = make_llama()
model.config._attn_implementation = "sdpa"
ids = torch.randint(1, 64, (4, 32), generator=torch.Generator().manual_seed(0))
rows = [{"input_ids": row, "labels": row, "position_ids": torch.arange(32)} for row in ids]
loader = torch.utils.data.DataLoader(rows, batch_size=1)
optimizer = torch.optim.SGD(model.parameters(), lr=float(sys.argv[2]))
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
losses = []
for batch in loader:
    if sp_size == 1:
        loss = model(**batch).loss
    else:  # Accelerate's guide: each rank's part of the loss, weighted by its tokens, over the group
        from deepspeed.utils import groups

        group = groups._get_sequence_parallel_group()
        logits = model(**batch).logits
        labels = batch["shift_labels"]
        part = accelerator.unwrap_model(model).loss_function(logits=logits, labels=None, shift_labels=labels,
                                                             vocab_size=64)
        parts = torch.distributed.nn.functional.all_gather(part, group=group)
        counts = torch.distributed.nn.functional.all_gather((labels != -100).sum(), group=group)
        loss = sum(p * c for p, c in zip(parts, counts)) / sum(counts)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
report("losses", losses)
