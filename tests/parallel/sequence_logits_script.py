"""Launched by test_sequence_parallel.py on 2 processes: a tiny Llama's forward with the sequence split (one batch
through the prepared model) against the same weights' forward on the whole sequence in this process."""

from __future__ import annotations

import torch
from launching import report
from tensor_tiny import make_llama

from accel import Accelerator, ParallelismConfig

accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(sp_size=2))
whole, model = make_llama(), make_llama()
for each in (whole, model):
    each.config._attn_implementation = "sdpa"
ids = torch.randint(1, 64, (2, 32), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    expected = whole(input_ids=ids, labels=ids)
model = accelerator.prepare(model)
batch = accelerator.sequence_parallel.shard_batch({"input_ids": ids, "labels": ids})
with torch.no_grad():
    got = model(**batch)
rank = accelerator.process_index
report("logits_difference", (got.logits - expected.logits[:, 16 * rank:16 * (rank + 1)]).abs().max().item())
report("losses", [got.loss.item(), expected.loss.item()])
