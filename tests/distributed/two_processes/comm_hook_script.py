"""Launched on 2 processes by test_comm_hooks.py: DDP communication hooks chosen through DistributedDataParallelKwargs."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from accel import Accelerator, DDPCommunicationHookType, DistributedDataParallelKwargs
from launching import report

LR = 1e-3
HANDLERS = {
    "none": DistributedDataParallelKwargs(),
    "fp16": DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.FP16),
    "power_sgd": DistributedDataParallelKwargs(
        comm_hook="power_sgd", comm_wrapper=DDPCommunicationHookType.FP16,
        comm_state_option={"matrix_approximation_rank": 1, "start_powerSGD_iter": 2},
    ),
}


def train(name: str, handler: DistributedDataParallelKwargs, steps: int) -> None:
    """`steps` SGD steps through the Accelerator; reports the hook DDP runs, and per step how far
    the update is from the float32 average of the processes' gradients, computed here without DDP."""
    accelerator = Accelerator(kwarg_handlers=[handler])
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32, bias=False)  # a gradient of rank 16 (the batch): far from rank 1
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(1 + accelerator.process_index)
    errors = []
    for _ in range(steps):
        x = torch.randn(16, 64, generator=generator)
        plain = copy.deepcopy(model)
        plain(x).square().sum().backward()
        average = plain.weight.grad.clone()
        dist.all_reduce(average)
        average /= accelerator.num_processes
        before = model.weight.detach().clone()
        accelerator.backward(prepared(x).square().sum())
        optimizer.step()
        optimizer.zero_grad()
        update = (before - model.weight.detach()) / LR
        errors.append(((update - average).abs().max() / average.abs().max()).item())
    weights = [torch.zeros_like(model.weight) for _ in range(accelerator.num_processes)]
    dist.all_gather(weights, model.weight.detach())
    report(f"{name} hook", str(prepared._get_ddp_logging_data().get("comm_hook", "")))
    report(f"{name} errors", errors)
    report(f"{name} same weights", all(torch.equal(weights[0], w) for w in weights))


if __name__ == "__main__":
    for name, handler in HANDLERS.items():
        train(name, handler, steps=4)
    try:  # torch's bf16 hooks run on nccl/xccl only; gloo here
        Accelerator(kwarg_handlers=[DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.BF16)])
    except ValueError as error:
        report("bf16 refused", str(error))
