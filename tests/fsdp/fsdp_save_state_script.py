"""Launched by test_fsdp_save_state.py: accelerator.save_state / load_state with fsdp_plugin.

    fsdp_save_state_script.py MODE FOLDER

Each run trains TinyNet with a prepared dataloader (shuffled), an LR scheduler, a registered
counter and per-process random noise on the inputs, so that every part of a checkpoint matters.

* save (2 processes): for fp32 (SHARDED_STATE_DICT and FULL_STATE_DICT) and bf16: the
  uninterrupted run (TOTAL steps), and a run that saves after steps SAVE_AT - 1 and SAVE_AT
  (inside an epoch, automatic naming, total_limit=1) and then ends; the fp32 runs also save
  FOLDER/boundary_<name> between epochs 0 and 1; then a DDP run saves FOLDER/boundary_ddp there.
* reshard (1 process): the boundary checkpoints loaded with and without fsdp_plugin; a model of
  other shapes refused; one epoch saved with the plugin (FOLDER/one_sharded) and without (one_plain).
* reshard4 (4 processes): the boundary checkpoints loaded with the plugin (resharded 2 -> 4),
  and one saved by 2 DDP processes (FOLDER/boundary_ddp, written by `save`).
* resume (2 processes): each saved run resumed from its newest checkpoint and trained to TOTAL;
  one_sharded and one_plain loaded by 2 sharded processes; then a new run in which process 1
  dies (exit status 3) while writing its shards of the second save, which ends the launch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from fsdp_tiny import WIDTH, as_lists, loss_of, make_model, optimizer_for
from launching import report
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, DataLoaderConfiguration, ProjectConfiguration
from accel.checkpointing import CheckpointError
from accel.fsdp import full_optimizer_state_dict
from accel.utils import FullyShardedDataParallelPlugin

TOTAL = 7
SAVE_AT = 6
"""Steps run in all, and the step after which the interrupted run saves (epoch 1, batch 2 of 4)."""
BOUNDARY = 4
"""Steps per epoch with 2 processes: FOLDER/boundary is saved after it."""


class Counter:
    """A registered object: counts the steps (its state is a tensor)."""

    def __init__(self) -> None:
        self.steps = 0

    def state_dict(self) -> dict[str, Any]:
        return {"steps": torch.tensor(self.steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])


def build(precision: str, project: Path | None, fsdp: str | None = "SHARDED_STATE_DICT", width: int = WIDTH) -> Any:
    """A prepared training setup; `fsdp=None` trains without the plugin."""
    plugin = None
    if fsdp is not None:
        plugin = FullyShardedDataParallelPlugin(
            auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap="Block", state_dict_type=fsdp
        )
    config = ProjectConfiguration(project_dir=project, total_limit=1) if project is not None else None
    accelerator = Accelerator(
        mixed_precision=precision, cpu=True, fsdp_plugin=plugin, project_config=config,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),  # train() goes on where it stopped
    )
    torch.manual_seed(0)
    model = make_model(width=width)
    data = torch.randn(32, 8, generator=torch.Generator().manual_seed(3))
    loader = DataLoader(TensorDataset(data, data[:, :4].sin()), batch_size=4, shuffle=True)
    optimizer = optimizer_for(model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.8**step)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    torch.manual_seed(100 + accelerator.process_index)  # each process its own noise
    return (accelerator, *accelerator.prepare(model, optimizer, loader, scheduler), counter)


def train(
    parts: Any,
    until: int,
    saves: dict[int, Callable[[], Any]] | None = None,
    epoch_end: Callable[[], bool] | None = None,
) -> list[float]:
    """Train from where the counter and the loader stand to step `until`, calling `saves[step]()`
    after that step and `epoch_end()` after each epoch (True: stop); return the losses (mean over processes)."""
    accelerator, model, optimizer, loader, scheduler, counter = parts
    losses: list[float] = []
    while counter.steps < until:
        for inputs, targets in loader:
            noisy = inputs + 0.1 * torch.randn_like(inputs)
            loss = loss_of(model, noisy, targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            counter.steps += 1
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
            (saves or {}).get(counter.steps, lambda: None)()
            if counter.steps == until:
                return losses
        if epoch_end is not None and epoch_end():
            return losses
    return losses


def full_state(parts: Any) -> dict[str, Any] | None:
    """The model's weights and the optimizer's state, gathered (main process; others None)."""
    accelerator, model, optimizer = parts[:3]
    weights = accelerator.get_state_dict(model)
    moments = full_optimizer_state_dict(accelerator.unwrap_model(model), optimizer)
    if not accelerator.is_main_process:
        return None
    state = {f"state.{name}.{key}": value for name, entry in moments["state"].items() for key, value in entry.items()}
    return {"weights": as_lists(weights), "optimizer": as_lists(state)}


RUNS = {"fp32": ("no", "SHARDED_STATE_DICT"), "full": ("no", "FULL_STATE_DICT"), "bf16": ("bf16", "SHARDED_STATE_DICT")}
"""name -> (mixed_precision, state_dict_type) of the runs saved by `save` and resumed by `resume`."""


def save(folder: Path) -> None:
    for name, (precision, kind) in RUNS.items():
        straight = build(precision, None, kind)
        report(f"{name}_losses", train(straight, TOTAL))
        report(f"{name}_straight", full_state(straight))
        straight[0].end_training()
        interrupted = build(precision, folder / name, kind)
        accelerator = interrupted[0]
        saves = {SAVE_AT - 1: accelerator.save_state, SAVE_AT: accelerator.save_state}  # total_limit=1 keeps one
        at_boundary = name != "bf16" and _boundary_saver(interrupted, folder / f"boundary_{name}", name)
        train(interrupted, SAVE_AT, saves, at_boundary or None)  # then this run ends, as if killed
        report(f"{name}_layout", sorted(str(p.relative_to(folder / name)) for p in (folder / name).rglob("*")))
        accelerator.end_training()
    ddp = build("no", None, fsdp=None)  # DDP: FOLDER/boundary_ddp, for reshard4 to load sharded
    train(ddp, TOTAL * 10, epoch_end=lambda: bool(ddp[0].save_state(folder / "boundary_ddp")))  # after epoch 0
    report("ddp_boundary", full_state(ddp))
    ddp[0].end_training()


def _boundary_saver(parts: Any, target: Path, name: str) -> Callable[[], bool]:
    """After epoch 0, save to `target` (between epochs: loads on any number of processes) and report the state."""

    def save_at_boundary() -> bool:
        if parts[-1].steps == BOUNDARY:
            parts[0].save_state(target)
            report(f"{name}_boundary", full_state(parts))
        return False

    return save_at_boundary


def resume(folder: Path) -> None:
    """The saved runs resumed to the end; the 1-process checkpoints loaded by 2 processes; then `crash`."""
    for name, (precision, kind) in RUNS.items():
        parts = build(precision, folder / name, kind)
        report(f"{name}_loaded", parts[0].load_state().name)
        report(f"{name}_resumed_losses", train(parts, TOTAL))
        report(f"{name}_resumed", full_state(parts))
        parts[0].end_training()
    for saved in ("one_sharded", "one_plain"):
        parts = build("no", None)
        parts[0].load_state(folder / saved)
        report(f"{saved}_by_two", full_state(parts))
        parts[0].end_training()
    crash(folder)


def reshard(folder: Path) -> None:
    """One process: the 2-process boundary checkpoints loaded with the plugin (resharded) and without it,
    a model of other shapes refused, then one epoch saved with the plugin and without it."""
    for name in ("fp32", "full"):
        for fsdp in ("SHARDED_STATE_DICT", None):
            parts = build("no", None, fsdp)
            parts[0].load_state(folder / f"boundary_{name}")
            report(f"{name}_boundary_by_one_{fsdp is not None}", full_state(parts))
    wrong = build("no", None, width=24)
    before = as_lists(wrong[0].get_state_dict(wrong[1]))
    try:
        wrong[0].load_state(folder / "boundary_fp32")
        report("mismatch", None)
    except CheckpointError as error:
        report("mismatch", str(error))
    report("mismatch_untouched", as_lists(wrong[0].get_state_dict(wrong[1])) == before)
    for saved, fsdp in (("one_sharded", "SHARDED_STATE_DICT"), ("one_plain", None)):
        parts = build("no", None, fsdp)
        train(parts, TOTAL * 10, epoch_end=lambda: True)  # one epoch
        parts[0].save_state(folder / saved)
        report(saved, full_state(parts))


def reshard4(folder: Path) -> None:
    """Four sharded processes: the 2-process boundary checkpoints (sharded and gathered) loaded."""
    for name in ("fp32", "full", "ddp"):
        parts = build("no", None)
        parts[0].load_state(folder / f"boundary_{name}")
        report(f"{name}_boundary_by_four", full_state(parts))
        parts[0].end_training()


def crash(folder: Path) -> None:
    """Process 1 dies (os._exit) while torch.distributed.checkpoint writes its shards of the second save."""
    parts = build("no", folder / "crash")
    accelerator = parts[0]

    def die_while_writing() -> None:
        report("crash_saving", [p.name for p in (folder / "crash" / "checkpoints").iterdir()])
        if accelerator.process_index == 1:
            dcp.FileSystemWriter.write_data = lambda *args: os._exit(3)  # type: ignore[method-assign]
        accelerator.save_state()

    train(parts, 3, {2: accelerator.save_state, 3: die_while_writing})


def main() -> None:
    mode, folder = sys.argv[1], Path(sys.argv[2])
    {"save": save, "resume": resume, "reshard": reshard, "reshard4": reshard4}[mode](folder)


if __name__ == "__main__":
    main()
