"""Launched on 2 processes by test_fp8_fsdp.py: FP8 (ao, native) under FSDP2 and under DDP, one
Accelerator after another, on the same model, data and optimizer built before prepare."""

from __future__ import annotations

import sys
import warnings

from fsdp_tiny import batch, loss_of, make_model, optimizer_for
from launching import report

from accel import Accelerator, FP8RecipeKwargs
from accel.utils import FullyShardedDataParallelPlugin

STEPS = 6


def train(backend: str, sharded: bool) -> None:
    recipe = FP8RecipeKwargs(backend=backend, base_precision="fp32")
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator = Accelerator(
            cpu=True, mixed_precision="fp8", kwarg_handlers=[recipe], fsdp_plugin=plugin if sharded else None
        )
    model = make_model()
    optimizer = optimizer_for(model)  # built before prepare: it must follow the converted, sharded parameters
    model, optimizer = accelerator.prepare(model, optimizer)
    rank, world = accelerator.process_index, accelerator.num_processes
    losses = []
    for step in range(STEPS):
        x, y = batch(step, rank, world)
        loss = loss_of(model, x, y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    model.eval()
    x, y = batch(0, rank, world)
    eval_loss = accelerator.reduce(loss_of(model, x, y).detach(), "mean").item()
    tag = f"{backend}_{'fsdp' if sharded else 'ddp'}"
    report(f"{tag}_losses", losses)
    report(f"{tag}_eval", eval_loss)
    report(f"{tag}_describe", accelerator.precision.describe())
    report(f"{tag}_report", accelerator.conversion_report.summary())
    report(f"{tag}_warnings", [str(w.message)[:60] for w in caught])
    report(f"{tag}_precomputed", sum(
        getattr(getattr(m.weight, "_local_tensor", None), "_precomputed_scale", None) is not None
        for m in model.modules() if hasattr(m, "weight")
    ))
    full = accelerator.get_state_dict(model)
    weight_sum = float(full["blocks.0.up.weight"].double().sum()) if accelerator.is_main_process else None
    report(f"{tag}_weight_sum", weight_sum)
    if sharded:  # an inf in one shard of one process: every process must skip the step
        model.train()
        accelerator.backward(loss_of(model, *batch(0, rank, world)))
        if rank == 0:
            next(model.parameters()).grad.to_local().view(-1)[0] = float("inf")
        optimizer.step()
        optimizer.zero_grad()
        report(f"{backend}_fsdp_skipped_inf", accelerator.optimizer_step_was_skipped)
    accelerator.end_training()


for name in sys.argv[1].split(","):
    train(name, sharded=False)
    train(name, sharded=True)
