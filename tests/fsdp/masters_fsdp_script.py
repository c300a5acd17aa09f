"""Launched on 2 processes by test_masters_fsdp.py: a bf16 model under bf16 mixed precision and FSDP2 is sharded as
float32 masters (a frozen bf16 part stays bf16), and the optimizer built before prepare steps them."""

from __future__ import annotations

import torch
from fsdp_tiny import batch, loss_of, make_model
from launching import report

from accel import Accelerator
from accel.utils import FullyShardedDataParallelPlugin

plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"])
accelerator = Accelerator(cpu=True, mixed_precision="bf16", fsdp_plugin=plugin)
model = make_model().to(torch.bfloat16)
model.embed.requires_grad_(False)  # frozen, in the root unit beside the trainable head
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
model, optimizer = accelerator.prepare(model, optimizer)
report("upcast", len(accelerator.precision.upcast_parameters))
report("dtypes", {name: str(p.dtype) for name, p in model.named_parameters()})
sharded = {id(p) for p in model.parameters()}
report("optimizer_follows", all(id(p) in sharded for group in optimizer.param_groups for p in group["params"]))
rank, world = accelerator.process_index, accelerator.num_processes
losses = []
for step in range(3):
    x, y = batch(step, rank, world)
    loss = loss_of(model, x, y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(accelerator.reduce(loss.detach(), "mean").item())
report("losses", losses)
report("state_dtypes", sorted({str(s["exp_avg"].dtype) for s in optimizer.state.values()}))
accelerator.end_training()
