"""Launched on 2 processes by test_surface.py: the Accelerator's process helpers, each rank reporting what it saw."""

from __future__ import annotations

import torch
from launching import report
from torch import nn

from accel import Accelerator
from accel.utils import synchronize_rng_states

accelerator = Accelerator(cpu=True)
rank = accelerator.process_index

with accelerator.split_between_processes(list(range(5))) as share:
    report("split", share)
with accelerator.split_between_processes(list(range(5)), apply_padding=True) as share:
    report("split_padded", share)
with accelerator.split_between_processes({"a": torch.arange(4), "b": [10, 11, 12, 13]}) as share:
    report("split_dict", {"a": share["a"].tolist(), "b": share["b"]})

ragged = torch.full((rank + 1, 2), float(rank + 1))
report("padded", accelerator.pad_across_processes(ragged, dim=0, pad_index=-1).tolist())
report("padded_first", accelerator.pad_across_processes(ragged, dim=0, pad_first=True).tolist())

value = torch.tensor([float(rank + 1), float(-rank)])
report("max", accelerator.reduce(value.clone(), "max").tolist())
report("min", accelerator.reduce(value.clone(), "min").tolist())
report("mean", accelerator.reduce(value.clone(), "mean").tolist())
report("scaled", accelerator.reduce(value.clone(), "sum", scale=0.5).tolist())
report("broadcast", accelerator.broadcast(torch.tensor([rank * 7.0]), from_process=1).tolist())

report("on_last", accelerator.on_last_process(lambda: "ran")())
report("on_process", accelerator.on_process(lambda: "ran", process_index=0)())
report("on_local", accelerator.on_local_process(local_process_index=1)(lambda: "ran")())
report("is_last", accelerator.is_last_process)
report("distributed_type", str(accelerator.distributed_type.value))
report("use_distributed", accelerator.use_distributed)

if rank == 1:
    accelerator.set_trigger()
report("trigger", accelerator.check_trigger())
report("trigger_again", accelerator.check_trigger())

model = accelerator.prepare(nn.Linear(2, 1, bias=False))
with torch.no_grad():
    model.module.weight.fill_(1.0)
steps = 3 + 2 * rank  # rank 1 has more batches: without join, rank 0's all-reduce would be missing
with accelerator.join_uneven_inputs([model]):
    for _ in range(steps):
        model.module.weight.grad = None
        model(torch.ones(1, 2)).sum().backward()
report("joined", True)
report("grad", model.module.weight.grad.tolist())

with accelerator.no_sync(model):
    model.module.weight.grad = None
    with accelerator.trigger_sync_in_backward(model):
        model(torch.full((1, 2), float(rank))).sum().backward()
report("synced_grad", model.module.weight.grad.tolist())
torch.manual_seed(100 + rank)
synchronize_rng_states(["torch"])
report("rng", torch.rand(1).item())
accelerator.end_training()
report("done", True)
