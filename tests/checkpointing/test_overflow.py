"""fp16 with inf/NaN gradients injected at chosen steps: exactly those optimizer steps are
skipped, the loss scale backs off on each, parameters and learning rate stay unchanged on them,
and training ends finite. A checkpoint taken after an overflow carries the backed-off scale."""

from __future__ import annotations

from pathlib import Path

import torch

from checkpoint_scenario import Job, build

POISONED = {4: float("inf"), 5: float("nan"), 11: float("inf")}
"""Micro-batch -> the value put into one gradient. Accumulation is 1 here: one step per micro-batch."""


def test_poisoned_steps_are_skipped_exactly(tmp_path: Path) -> None:
    setup = build(Job(precision="fp16", project_dir=str(tmp_path)))
    accelerator = setup.accelerator
    accelerator.gradient_accumulation_steps = 1
    skipped = []
    batches = iter(setup.loader)
    for step in range(16):
        params = [p.detach().clone() for p in setup.model.parameters()]
        lr, scale = setup.scheduler.get_last_lr(), accelerator.step_stats["loss_scale"]
        setup.micro_batch(*next(batches), poison=POISONED.get(step))
        unchanged = all(torch.equal(a, b) for a, b in zip(params, setup.model.parameters()))
        if accelerator.optimizer_step_was_skipped:
            skipped.append(step)
            assert unchanged, f"step {step} was skipped but changed the parameters"
            assert setup.scheduler.get_last_lr() == lr, f"step {step} was skipped but moved the learning rate"
            assert accelerator.step_stats["loss_scale"] == scale * 0.5
        else:
            assert not unchanged and setup.scheduler.get_last_lr() != lr
            assert accelerator.step_stats["loss_scale"] == scale
        if step == 7:
            batches = iter(setup.loader)
    assert skipped == sorted(POISONED)
    assert accelerator.step_stats["skipped_steps"] == len(POISONED)
    assert all(torch.isfinite(p).all() for p in setup.model.parameters())


def test_a_checkpoint_after_an_overflow_keeps_the_backed_off_scale(tmp_path: Path) -> None:
    setup = build(Job(precision="fp16", project_dir=str(tmp_path / "a")))
    setup.accelerator.gradient_accumulation_steps = 1
    batches = iter(setup.loader)
    setup.micro_batch(*next(batches), poison=float("inf"))
    assert setup.accelerator.step_stats == {"loss_scale": 512.0, "skipped_steps": 1}
    folder = setup.accelerator.save_state(tmp_path / "ckpt")
    other = build(Job(precision="fp16", project_dir=str(tmp_path / "b")))
    other.accelerator.gradient_accumulation_steps = 1
    other.accelerator.load_state(folder)
    assert other.accelerator.step_stats == {"loss_scale": 512.0, "skipped_steps": 1}
