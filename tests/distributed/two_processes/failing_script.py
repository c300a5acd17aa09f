"""Run by test_failure.py: rank 1 raises in its third step while rank 0 goes on into the gradient
all-reduce; `accel launch` must end every process and exit non-zero, naming rank 1."""

from __future__ import annotations

import torch
from torch import nn

from accel import Accelerator


def main() -> None:
    accelerator = Accelerator()
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(1000):
        if accelerator.process_index == 1 and step == 2:
            raise RuntimeError("rank 1 fails on purpose")
        loss = model(torch.randn(4, 8)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
