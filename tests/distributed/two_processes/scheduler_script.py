"""The learning-rate schedule of a typical script on 2 processes, run by test_scheduler.py under accel
(`accel launch`) and under Accelerate (torchrun); only the import line differs.

The schedule is sized before `prepare`, as most scripts size it: a LambdaLR decaying to zero over
`len(train_dataloader)` (64 samples, batch 4: 16 batches), for one epoch. Arguments: the library
(`accel` or `accelerate`), the gradient accumulation steps, and `per_step` for accel's
`scheduler_per_optimizer_step=True`. Each rank reports the lr after every batch. `cpu=True`: Accelerate runs
several CPU processes only when told to use the CPU.
"""

from __future__ import annotations

import os
import sys

import torch
from launching import report
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "accelerate":
    from accelerate import Accelerator
else:
    from accel import Accelerator

SAMPLES, BATCH = 64, 4


def main() -> None:
    accumulation = int(sys.argv[2])
    options = {"scheduler_per_optimizer_step": True} if sys.argv[3:] == ["per_step"] else {}
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulation, **options)
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loader = DataLoader(TensorDataset(torch.randn(SAMPLES, 2), torch.randn(SAMPLES, 1)), batch_size=BATCH)
    total = len(loader)  # 16, before prepare
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / total)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    lrs = []
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        lrs.append(scheduler.get_last_lr()[0])
    report("lrs", lrs)
    report("num_processes", accelerator.num_processes)
    # Leave the process group together: a gloo rank exiting while the other still talks to it can abort
    # (SIGABRT at exit, seen under Accelerate on a loaded machine).
    accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    if sys.argv[1] == "accelerate":
        # Accelerate's processes sometimes abort while the interpreter shuts down ("terminate called without an
        # active exception", SIGABRT, seen twice in full-suite runs) after everything is reported: the reference
        # run ends here, without that teardown. accel's run exits normally, so a crash of its own still fails.
        os._exit(0)
