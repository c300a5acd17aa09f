"""Launched by test_tensor_presplit.py: the model comes split already, as Accelerate's documented way has it
(`from_pretrained(..., tp_plan="auto", device_mesh=accelerator.torch_device_mesh)`, transformers shards it), then
`prepare` and a few SGD steps on every process's same batch. argv: the saved model's folder, tp size (1: one
process, the reference)."""

from __future__ import annotations

import sys

import torch
from launching import report
from transformers import AutoModelForCausalLM

from accel import Accelerator, ParallelismConfig

folder, tp_size = sys.argv[1], int(sys.argv[2])
accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(tp_size=tp_size) if tp_size > 1 else None)
split = {"tp_size": tp_size, "tp_plan": "auto", "device_mesh": accelerator.torch_device_mesh} if tp_size > 1 else {}
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_cache=False, **split)
before = {name: type(p).__name__ for name, p in model.named_parameters()}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
losses = []
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
report("losses", losses)
report("split", sorted(set(before.values())))
report("kept", all(type(p).__name__ == before[name] for name, p in model.named_parameters()))
