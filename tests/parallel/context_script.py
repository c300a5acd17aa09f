"""Launched by test_context_parallel.py on CUDA GPUs: a tiny Llama (sdpa) trained 5 SGD steps on 2 sequences of
64 tokens, the sequence split over cp_size ranks inside `accelerator.maybe_context_parallel` (FSDP2 over cp), as
Accelerate's nd_parallel.py does; argv: cp_size (1: one process, the reference)."""

from __future__ import annotations

import sys

import torch
from launching import report
from tensor_tiny import make_llama

from accel import Accelerator, ParallelismConfig
from accel.utils import FullyShardedDataParallelPlugin

cp_size = int(sys.argv[1])
accelerator = Accelerator(parallelism_config=ParallelismConfig(cp_size=cp_size) if cp_size > 1 else None,
                          fsdp_plugin=FullyShardedDataParallelPlugin() if cp_size > 1 else None)
model = make_llama()
model.config._attn_implementation = "sdpa"
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
losses = []
for step in range(5):
    ids = torch.randint(0, 64, (2, 64), generator=torch.Generator().manual_seed(step)).to(accelerator.device)
    labels = torch.nn.functional.pad(ids[:, 1:], (0, 1), value=-100)
    positions = torch.arange(64, device=accelerator.device).expand(2, 64).contiguous()
    batch = {"input_ids": ids, "shift_labels": labels, "labels": labels, "position_ids": positions}
    buffers = list(batch.values())
    with accelerator.maybe_context_parallel(buffers=buffers, buffer_seq_dims=[1] * 4, no_restore_buffers=set(buffers)):
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    losses.append(accelerator.reduce(loss.detach(), "mean").item())
report("losses", losses)
