"""Launched by test_tensor_training.py: tensor parallelism (and FSDP2 + TP) through the Accelerator, against one process.

argv: train|load, kind (mlp | llama | tied), tp size, checkpoint folder. The mesh is ("dp_shard", "tp") with dp_shard =
processes / tp; the ranks of one tp group get the same part of the batch. `train` trains, compares with one process
and saves a sharded checkpoint (and the reference's final weights beside it); `load` builds the model on this
layout (tp size 1: plain data parallelism), loads that checkpoint and compares its full weights with the reference's.
An optional fifth argument accumulates gradients over that many micro-batches per step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from launching import report
from tensor_tiny import MAX_NORM, PLAN, STEPS, data, loss_of, make, max_difference, train_reference
from torch.distributed.device_mesh import init_device_mesh

from accel import Accelerator
from accel.parallel.tensor_strategy import TensorParallelStrategy

mode, kind, tp_size, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
accumulate = int(sys.argv[5]) if len(sys.argv) > 5 else 1
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulate)
world = accelerator.num_processes
mesh = init_device_mesh("cpu", (world // tp_size, tp_size), mesh_dim_names=("dp_shard", "tp"))
if tp_size > 1:
    accelerator.strategy = TensorParallelStrategy(
        accelerator.process_state, accelerator.precision, accelerator.handlers, mesh, None, PLAN if kind == "mlp" else None
    )
model = make(kind)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)  # before prepare: it must follow the split
model, optimizer = accelerator.prepare(model, optimizer)
if mode == "load":
    accelerator.load_state(folder / "checkpoint")
    full = accelerator.get_state_dict(model)
    saved = torch.load(folder / f"reference_{kind}.pt")
    report("loaded_difference", max_difference(full, saved) if accelerator.is_main_process else None)
    report("optimizer_steps", sorted({int(s["step"]) for s in optimizer.optimizer.state.values()}))
    accelerator.end_training()
    sys.exit(0)
part, parts = mesh["dp_shard"].get_local_rank(), mesh["dp_shard"].size()
losses, norms = [], []
for step in range(STEPS):
    micro_losses = []
    for micro in range(accumulate):  # equal micro-batches: their mean loss is the whole batch's
        with accelerator.accumulate(model):  # 2-D: FSDP2 skips the reduce-scatter until the last one
            loss = loss_of(kind, model, data(kind, step, part * accumulate + micro, parts * accumulate))
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
        micro_losses.append(accelerator.reduce(loss.detach(), "mean").item())
    losses.append(sum(micro_losses) / accumulate)
reference = train_reference(kind)
full = accelerator.get_state_dict(model)
report("split", sorted({type(p).__name__ for p in model.parameters()}))
report("tied", [name for name, _ in model.named_parameters(remove_duplicate=False)
                if name not in dict(model.named_parameters())])
report("loss_difference", max(abs(a - b) for a, b in zip(losses, reference["losses"])))
report("norm_difference", max(abs(a - b) for a, b in zip(norms, reference["norms"])))
report("weight_difference", max_difference(full, reference["weights"]) if accelerator.is_main_process else None)
checkpoint = accelerator.save_state(folder / "checkpoint")
report("checkpoint", sorted(p.name for p in checkpoint.iterdir()))
if accelerator.is_main_process:
    torch.save(full, folder / f"reference_{kind}.pt")  # the weights this run reached, for the `load` runs
accelerator.end_training()
