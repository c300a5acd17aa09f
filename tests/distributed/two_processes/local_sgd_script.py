"""Run by test_local_sgd.py under `accel launch --num_processes 2 --cpu`: LocalSGD with a DDP model
whose ranks see different data, reporting the parameters before and after each averaging."""

from __future__ import annotations

import torch
from launching import report

from accel import Accelerator
from accel.local_sgd import LocalSGD


def params(model: torch.nn.Module) -> list[float]:
    return [round(v, 6) for p in model.parameters() for v in p.detach().flatten().tolist()]


def main() -> None:
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    rank = accelerator.process_index
    inputs = torch.full((4, 2), float(rank + 1))  # each rank its own data: without averaging they drift apart
    seen = []
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=2) as local_sgd:
        for _ in range(3):
            accelerator.backward(model(inputs).sum())
            optimizer.step()
            optimizer.zero_grad()
            seen.append(params(model))  # before this step's averaging, if any
            local_sgd.step()
            seen.append(params(model))
    report("local", seen)
    report("after_exit", params(model))  # the block's exit averages once more
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=1, enabled=False) as disabled:
        accelerator.backward(model(inputs).sum())
        optimizer.step()
        disabled.step()
    report("disabled", [disabled.enabled, disabled.num_steps, params(model)])


if __name__ == "__main__":
    main()
