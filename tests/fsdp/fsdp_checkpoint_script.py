"""Launched by test_fsdp_checkpoints.py. `save FOLDER` (2 processes): train 2 steps, save sharded
and full checkpoints, train 2 more (the uninterrupted run); then resume from each checkpoint in
fresh models and train the same 2 steps; consolidate; load into a model of other shapes.
`resume FOLDER` (1 process): load the 2-process sharded checkpoint into an unsharded model."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from launching import report
from fsdp_tiny import WIDTH, as_lists, batch, loss_of, make_model, optimizer_for

from accel import Accelerator
from accel.training.model import prepare_model
from accel.fsdp import (
    FullyShardedDataParallelPlugin,
    consolidate,
    full_optimizer_state_dict,
    full_state_dict,
    load_full,
    load_sharded,
    save_sharded,
    shard_model,
)

PLUGIN = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap="Block")


def fresh(accelerator: Accelerator, seed: int = 1, width: int = WIDTH) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A sharded TinyNet (seed 1: weights unlike the saved ones) and its optimizer, built after sharding."""
    model = make_model(seed=seed, width=width)
    model = prepare_model(model, accelerator.precision, accelerator.device, True, accelerator.process_state)
    model = shard_model(model, PLUGIN, accelerator.mixed_precision, accelerator.device, accelerator.process_state)
    return model, optimizer_for(model)


def train(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        x, y = batch(step, accelerator.process_index, accelerator.num_processes)
        loss_of(model, x, y).backward()
        optimizer.step()
        optimizer.zero_grad()


def save(accelerator: Accelerator, folder: Path) -> None:
    model, optimizer = fresh(accelerator, seed=0)
    train(accelerator, model, optimizer, range(2))
    save_sharded(folder / "sharded", model, optimizer)
    weights, moments = full_state_dict(model), full_optimizer_state_dict(model, optimizer)
    if accelerator.is_main_process:
        torch.save({"model": weights, "optimizer": moments}, folder / "full.pt")
    report("at_save", as_lists(weights))
    train(accelerator, model, optimizer, range(2, 4))
    report("uninterrupted", as_lists(full_state_dict(model)))
    dist.barrier()


def resume(accelerator: Accelerator, folder: Path) -> None:
    model, optimizer = fresh(accelerator)
    load_sharded(folder / "sharded", model, optimizer)
    train(accelerator, model, optimizer, range(2, 4))
    report("resumed_sharded", as_lists(full_state_dict(model)))
    model, optimizer = fresh(accelerator)
    saved = torch.load(folder / "full.pt", weights_only=True)
    load_full(model, optimizer, saved["model"], saved["optimizer"])
    train(accelerator, model, optimizer, range(2, 4))
    report("resumed_full", as_lists(full_state_dict(model)))
    model, optimizer = fresh(accelerator, width=24)
    try:
        load_sharded(folder / "sharded", model, optimizer)
        report("mismatch", None)
    except ValueError as error:
        report("mismatch", str(error))
    if accelerator.is_main_process:
        report("consolidated", str(consolidate(folder / "sharded", folder / "consolidated")))


def resume_on_one_process(accelerator: Accelerator, folder: Path) -> None:
    model, optimizer = fresh(accelerator)
    report("one_process_sharded", type(model).__name__)
    load_sharded(folder / "sharded", model, optimizer)
    train(accelerator, model, optimizer, range(2, 4))
    report("resumed_one", as_lists(full_state_dict(model)))


def main() -> None:
    mode, folder = sys.argv[1], Path(sys.argv[2])
    accelerator = Accelerator()
    if mode == "save":
        save(accelerator, folder)
        resume(accelerator, folder)
    else:
        resume_on_one_process(accelerator, folder)


if __name__ == "__main__":
    main()
