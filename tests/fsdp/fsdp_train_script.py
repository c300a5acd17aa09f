"""Launched with 2 processes by test_fsdp_training.py: shard TinyNet with accel.fsdp in several
ways, train a few steps on each process's half of the global batch, and report what happened.

The Accelerator gives the process group and the precision; the model goes through accel's
own prepare_model (conversion, weights sent from process 0) and then `shard_model`, as the
Accelerator will do under FSDP.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from launching import report
from fsdp_tiny import as_lists, batch, loss_of, make_model, optimizer_for

from accel import Accelerator
from accel.training.model import prepare_model
from accel.fsdp import (
    FullyShardedDataParallelPlugin,
    clip_grad_norm_,
    full_state_dict,
    no_sync,
    parameter_names,
    retarget_optimizer,
    shard_model,
)

BLOCKS = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"])


def sharded(accelerator: Accelerator, plugin: FullyShardedDataParallelPlugin) -> tuple[nn.Module, torch.optim.Optimizer]:
    """TinyNet prepared and sharded; its optimizer built *before* sharding and retargeted (Accelerate's order)."""
    model = make_model()
    optimizer = optimizer_for(model)
    names = parameter_names(model)
    model = prepare_model(model, accelerator.precision, accelerator.device, True, accelerator.process_state)
    model = shard_model(model, plugin, accelerator.mixed_precision, accelerator.device, accelerator.process_state)
    report_once("retargeted", retarget_optimizer(optimizer, names, model))
    return model, optimizer


_reported: set[str] = set()


def report_once(name: str, value: object) -> None:
    if name not in _reported:
        _reported.add(name)
        report(name, value)


def train(accelerator: Accelerator, plugin: FullyShardedDataParallelPlugin, steps: int, label: str) -> nn.Module:
    """`steps` steps of the sharded model on this process's part of the global batch; reports losses and norms."""
    model, optimizer = sharded(accelerator, plugin)
    rank, world = accelerator.process_index, accelerator.num_processes
    losses, norms = [], []
    for step in range(steps):
        x, y = batch(step, rank, world)
        loss = loss_of(model, x, y)
        loss.backward()
        norms.append(clip_grad_norm_(model.parameters(), 0.5).item())
        optimizer.step()
        optimizer.zero_grad()
        losses.append(mean_over_processes(loss.detach()))
    report(f"losses_{label}", losses)
    report(f"norms_{label}", norms)
    return model


def mean_over_processes(value: torch.Tensor) -> float:
    value = value.clone()
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


def base(accelerator: Accelerator) -> None:
    model = train(accelerator, BLOCKS, 4, "blocks")
    report("units", [name for name, m in model.named_modules() if isinstance(m, FSDPModule)])
    report("all_dtensors", all(isinstance(p, DTensor) for p in model.parameters()))
    report("local_numel", sum(p.to_local().numel() for p in model.parameters()))
    report("total_numel", sum(p.numel() for p in model.parameters()))
    report("full_state", as_lists(full_state_dict(model)))


def unsharded_norm(accelerator: Accelerator) -> None:
    """The norm clip_grad_norm_ returns vs the norm of the gathered full gradients, before clipping."""
    model, _ = sharded(accelerator, BLOCKS)
    x, y = batch(0, accelerator.process_index, accelerator.num_processes)
    loss_of(model, x, y).backward()
    full = torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()])
    norms = {str(t): full.norm(t).item() for t in (2.0, 1.0)}
    norms["inf"] = full.abs().max().item()
    clipped = {str(t): clip_grad_norm_(model.parameters(), 1e9, t).item() for t in (2.0, 1.0)}
    clipped["inf"] = clip_grad_norm_(model.parameters(), 1e9, math.inf).item()
    report("norm_pairs", [norms, clipped])


def options(accelerator: Accelerator) -> None:
    for label, extra in {
        "size": dict(auto_wrap_policy="size_based_wrap", min_num_params=1000),
        "offload": dict(cpu_offload=True),
        "no_reshard": dict(reshard_after_forward=False),
        "checkpointing": dict(activation_checkpointing=True),
    }.items():
        fields = BLOCKS.to_kwargs() if label != "size" else {}
        model = train(accelerator, FullyShardedDataParallelPlugin(**{**fields, **extra}), 3, label)
        report(f"units_{label}", [name for name, m in model.named_modules() if isinstance(m, FSDPModule)])
        if label in ("checkpointing", "offload"):
            report(f"forward_calls_{label}", forward_calls(model))
        if label == "offload":
            report("offload_devices", sorted({p.to_local().device.type for p in model.parameters()}))


def forward_calls(model: nn.Module) -> int:
    """How often blocks.0.up runs in one training step: twice where activations are recomputed."""
    calls = []
    handle = model.blocks[0].up.register_forward_hook(lambda *_: calls.append(1))
    x, y = batch(0)
    loss_of(model, x, y).backward()
    handle.remove()
    return len(calls)


def accumulation(accelerator: Accelerator) -> None:
    """Two micro-batches per step, the first under no_sync, vs both synced: the same weights."""
    results = []
    for skip in (False, True):
        model, optimizer = sharded(accelerator, BLOCKS)
        rank, world = accelerator.process_index, accelerator.num_processes
        for step in range(2):
            for micro in range(2):
                x, y = batch(10 * step + micro, rank, world)
                context = no_sync(model) if skip and micro == 0 else contextlib.nullcontext()
                with context:
                    (loss_of(model, x, y) / 2).backward()
            optimizer.step()
            optimizer.zero_grad()
        results.append(as_lists(full_state_dict(model)))
    report("accumulated", results)


def half_precisions() -> None:
    """bf16 mixed: fp32 shards, bf16 compute; bf16-true: bf16 shards; fp16: the scaler skips together."""
    for precision in ("bf16", "bf16-true"):
        accelerator = Accelerator(mixed_precision=precision)
        model, optimizer = sharded(accelerator, BLOCKS)
        seen = []
        model.blocks[0].up.register_forward_hook(lambda m, args, out: seen.append(str(args[0].dtype)))
        x, y = batch(0, accelerator.process_index, accelerator.num_processes)
        loss = loss_of(model, x, y)
        accelerator.precision.backward(loss)  # what accelerator.backward runs (it needs a prepared model)
        optimizer.step()
        report(f"half_{precision}", {"shard_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
                                     "compute": seen, "loss": loss.item()})
    fp16_skips()


def fp16_skips() -> None:
    """An inf in process 1's gradient shard only: both processes skip the step and keep their weights."""
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer = sharded(accelerator, BLOCKS)
    scaler = accelerator.precision.loss_scaler
    results = []
    for inject in (True, False):
        x, y = batch(0, accelerator.process_index, accelerator.num_processes)
        accelerator.precision.backward(loss_of(model, x, y))
        if inject and accelerator.process_index == 1:
            model.head.weight.grad.to_local().view(-1)[0] = float("inf")
        before = model.head.weight.to_local().clone()
        stepped = scaler.step(optimizer)
        optimizer.zero_grad()
        results.append({"stepped": stepped, "changed": not torch.equal(before, model.head.weight.to_local())})
    report("fp16_steps", results)


def main() -> None:
    accelerator = Accelerator()
    base(accelerator)
    unsharded_norm(accelerator)
    options(accelerator)
    accumulation(accelerator)
    half_precisions()


if __name__ == "__main__":
    main()
