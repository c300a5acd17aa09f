"""The training run that the checkpoint tests interrupt and resume.

A tiny model with dropout, a shuffling DataLoader whose epochs end mid-window, gradient
accumulation, AdamW, a learning-rate schedule, gradient clipping, and noise drawn from Python's,
numpy's and torch's RNGs: everything a resumed run must restore to match the uninterrupted one.
Saves happen inside the loop over batches, so that they fall in the middle of epochs.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DataLoaderConfiguration, GradScalerKwargs, ProjectConfiguration

WIDTH = 16
SAMPLES = 60  # 8 batches of 8: the last one has 4 samples
BATCH = 8
ACCUMULATION = 3  # windows of 3 micro-batches; the end of an epoch cuts one short


@dataclasses.dataclass(frozen=True)
class Job:
    """One training run: from a fresh start or the newest checkpoint, up to `until` micro-batches."""

    precision: str = "no"
    until: int = 40
    """Stop after this many micro-batches in total (counted across resumes)."""
    save_every: int = 0
    """Save an automatic checkpoint every this many micro-batches (0: never)."""
    stop_at: int | None = None
    """Save an automatic checkpoint at this micro-batch and stop there (the first half of a resume)."""
    resume: bool = False
    """load_state() the project's newest checkpoint first, if there is one."""
    project_dir: str = ""
    total_limit: int | None = None
    poison: tuple[int, ...] = ()
    """Micro-batches whose gradients get an inf (odd index) or NaN (even index) after backward."""
    result: str = ""
    """Where to write the final parameters (safetensors), if anywhere."""
    async_save: bool = False
    """Save with save_state(async_save=True): written in the background while training goes on."""


class Progress:
    """Micro-batches done so far; registered for checkpointing so that a resumed run knows where it is."""

    def __init__(self) -> None:
        self.micro_batches = 0

    def state_dict(self) -> dict[str, Any]:
        return {"micro_batches": self.micro_batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.micro_batches = int(state["micro_batches"])


@dataclasses.dataclass
class Setup:
    """The Accelerator and the objects it prepared."""

    accelerator: Accelerator
    model: nn.Module
    optimizer: Any
    scheduler: Any
    loader: Any
    progress: Progress

    def micro_batch(self, xb: torch.Tensor, yb: torch.Tensor, poison: float | None = None) -> None:
        """One micro-batch of training (a NaN or inf put into a gradient when `poison` is given)."""
        _micro_batch(self.accelerator, self.model, self.optimizer, self.scheduler, xb, yb, poison)
        self.progress.micro_batches += 1


def build(job: Job) -> Setup:
    """The Accelerator and prepared objects, built the same way in every process."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, WIDTH, generator=generator)
    y = x @ torch.randn(WIDTH, WIDTH, generator=generator)
    model = nn.Sequential(nn.Linear(WIDTH, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, WIDTH))
    handlers = [GradScalerKwargs(init_scale=1024.0)] if job.precision == "fp16" else []
    config = ProjectConfiguration(project_dir=job.project_dir, total_limit=job.total_limit, async_save=job.async_save)
    accelerator = Accelerator(
        mixed_precision=job.precision, gradient_accumulation_steps=ACCUMULATION, project_config=config,
        kwarg_handlers=handlers,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),  # the loop resumes where it stopped
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-4)  # 1e-8 is 0 in fp16 (16-true)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + 0.05 * step))
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    return Setup(accelerator, model, optimizer, scheduler, loader, progress)


def run(job: Job, ready: Any = None) -> dict[str, torch.Tensor]:
    """Run `job`; call `ready()` once set up (after resuming); return the final parameters."""
    setup = build(job)
    progress = setup.progress
    if job.resume and any(Path(job.project_dir, "checkpoints").glob("checkpoint_*")):
        setup.accelerator.load_state()
    if ready is not None:
        ready()
    while progress.micro_batches < job.until:
        for xb, yb in setup.loader:
            setup.micro_batch(xb, yb, _poison(progress.micro_batches) if progress.micro_batches in job.poison else None)
            done = progress.micro_batches
            if done == job.stop_at or (job.save_every and done % job.save_every == 0):
                setup.accelerator.save_state()
            if done == job.stop_at or done >= job.until:
                return _finish(job, setup.model)
    return _finish(job, setup.model)


def _micro_batch(accelerator: Accelerator, model: nn.Module, optimizer: Any, scheduler: Any,
                 xb: torch.Tensor, yb: torch.Tensor, poison: float | None) -> None:
    with accelerator.accumulate(model):
        noise = 1e-3 * (random.random() + float(np.random.rand())) + 1e-3 * torch.randn_like(xb)
        loss = nn.functional.mse_loss(model(xb + noise).float(), yb)
        accelerator.backward(loss)
        if poison is not None:
            next(model.parameters()).grad.view(-1)[0] = poison
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _poison(micro_batch: int) -> float:
    return float("inf") if micro_batch % 2 else float("nan")


def _finish(job: Job, model: nn.Module) -> dict[str, torch.Tensor]:
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    if job.result:
        temp = Path(job.result + ".tmp")
        temp.parent.mkdir(parents=True, exist_ok=True)
        save_file(params, str(temp))
        temp.rename(job.result)
    return params
