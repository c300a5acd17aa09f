"""Launched on 2 processes by test_accelerator_fsdp.py: FSDP2 through the Accelerator, as a script uses it."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from fsdp_tiny import as_lists, batch, loss_of, make_model, optimizer_for
from launching import report

from accel import Accelerator
from accel.utils import DistributedType, FullyShardedDataParallelPlugin

plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"])
accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
model = make_model()
optimizer = optimizer_for(model)  # built before prepare: prepare points it at the sharded parameters
model.head.weight.sequence_parallel = True  # as TransformerEngine marks its parameters
model.head.weight._private = "belongs to the unsharded tensor"
model, optimizer = accelerator.prepare(model, optimizer)
report("kept_attributes", [getattr(model.head.weight, "sequence_parallel", None),
                           hasattr(model.head.weight, "_private"), type(model.head.weight).__name__])
rank, world = accelerator.process_index, accelerator.num_processes
losses, norms = [], []
for step in range(4):
    x, y = batch(step, rank, world)
    loss = loss_of(model, x, y)
    accelerator.backward(loss)
    norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 0.5)))
    optimizer.step()
    optimizer.zero_grad()
    losses.append(accelerator.reduce(loss.detach(), "mean").item())
report("distributed_type", accelerator.distributed_type == DistributedType.FSDP)
report("losses", losses)
report("norms", norms)
state = accelerator.get_state_dict(model)  # every process takes part; the main one gets the tensors
report("weights", as_lists(state) if accelerator.is_main_process else None)
files = accelerator.save_model(model, sys.argv[1])
report("saved", [Path(f).name for f in files])
checkpoint = accelerator.save_state(Path(sys.argv[1]) / "ckpt")  # each process its shards (test_fsdp_save_state.py)
report("save_state", sorted(p.name for p in checkpoint.iterdir()))
accelerator.end_training()
