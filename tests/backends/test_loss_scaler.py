"""fp16 loss scaling under long runs of overflow: every step with inf/NaN gradients is skipped and
counted whatever the scale, the scale stops at its floor, a run that keeps overflowing ends with
LossScaleOverflowError, and nothing non-finite reaches the weights or the optimizer state."""

from __future__ import annotations

import copy
import json
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from accel import Accelerator, GradScalerKwargs
from accel.checkpointing.manifest import describe_file
from accel.backends.loss_scaler import LossScaleOverflowError, LossScaler


def _fp16(**scaler: object) -> Accelerator:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fp16 is slow on this CPU: said once, not under test here
        return Accelerator(mixed_precision="fp16", cpu=True, kwarg_handlers=[GradScalerKwargs(**scaler)])


def _mlp(
    accelerator: Accelerator, optimizer: Callable[..., torch.optim.Optimizer] = torch.optim.SGD
) -> tuple[nn.Module, torch.optim.Optimizer]:
    # Widths 4 and batch 4: fp16 matmuls are emulated on this CPU, some shapes take milliseconds.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    return accelerator.prepare(model, optimizer(model.parameters(), lr=1e-3))


def _train_step(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    accelerator.backward(model(x).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()


def _all_finite(model: nn.Module, optimizer: torch.optim.Optimizer) -> bool:
    tensors = [*model.parameters(), *(v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))]
    return all(torch.isfinite(t).all() for t in tensors)


def test_170_overflowing_steps_are_all_skipped_and_counted_at_the_floor() -> None:
    """Before the fix the scale reached 0.0 after 166 skips and later steps were no longer counted."""
    accelerator = _fp16(max_consecutive_skips=1000)
    model, optimizer = _mlp(accelerator)
    before = [p.detach().clone() for p in model.parameters()]
    skipped = []
    for _ in range(170):
        _train_step(accelerator, model, optimizer, torch.randn(4, 4) * 3e4)
        skipped.append(accelerator.optimizer_step_was_skipped)
    assert all(skipped)
    assert accelerator.step_stats == {"loss_scale": 1.0, "skipped_steps": 170}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_run_that_keeps_overflowing_stops_with_a_clear_error() -> None:
    accelerator = _fp16()
    model, optimizer = _mlp(accelerator)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(LossScaleOverflowError) as info:
        for _ in range(170):
            _train_step(accelerator, model, optimizer, torch.randn(4, 4) * 3e4)
    message = str(info.value)
    assert "the last 100 optimizer steps in a row were skipped" in message
    for advice in ("mixed_precision='bf16'", "lower the learning rate", "GradScalerKwargs(max_consecutive_skips="):
        assert advice in message
    assert isinstance(info.value, RuntimeError)
    assert accelerator.step_stats == {"loss_scale": 1.0, "skipped_steps": 100}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_1000_steps_with_15_percent_overflowing_batches_end_with_finite_weights() -> None:
    """Before the fix the scale sank below 2**-128, unscaling turned gradients into NaN after torch's
    inf check, and AdamW wrote NaN into the weights (at about step 860 of this run)."""
    accelerator = _fp16()
    model, optimizer = _mlp(accelerator, torch.optim.AdamW)
    generator = torch.Generator().manual_seed(1)
    overflowing = set(torch.randperm(1000, generator=generator)[:150].tolist())
    skipped = set()
    for step in range(1000):
        x = torch.randn(4, 4, generator=generator)
        _train_step(accelerator, model, optimizer, x * 1e6 if step in overflowing else x)
        if accelerator.optimizer_step_was_skipped:
            skipped.add(step)
    assert _all_finite(model, optimizer)
    assert skipped == overflowing
    assert accelerator.step_stats == {"loss_scale": 1.0, "skipped_steps": 150}


def test_a_step_after_a_skip_runs_and_resets_the_run_of_skips() -> None:
    accelerator = _fp16(init_scale=4.0, max_consecutive_skips=3)
    model, optimizer = _mlp(accelerator)
    for x in [torch.full((4, 4), 1e6)] * 2 + [torch.randn(4, 4)] + [torch.full((4, 4), 1e6)] * 2:
        _train_step(accelerator, model, optimizer, x)
    assert accelerator.precision.loss_scaler.consecutive_skips == 2
    assert accelerator.step_stats == {"loss_scale": 1.0, "skipped_steps": 4}


def test_the_floor_can_be_set_and_an_init_scale_below_one_is_its_own_floor() -> None:
    accelerator = _fp16(init_scale=64.0, min_scale=16.0)
    model, optimizer = _mlp(accelerator)
    for _ in range(5):
        _train_step(accelerator, model, optimizer, torch.full((4, 4), 1e6))
    assert accelerator.step_stats == {"loss_scale": 16.0, "skipped_steps": 5}
    assert _fp16(init_scale=0.25).precision.loss_scaler.floor == 0.25


def _overflow(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        _train_step(accelerator, model, optimizer, torch.full((4, 4), 1e6))


def test_the_run_of_skips_survives_a_checkpoint(tmp_path: Path) -> None:
    accelerator = _fp16(init_scale=4.0, max_consecutive_skips=5)
    model, optimizer = _mlp(accelerator)
    _overflow(accelerator, model, optimizer, 3)
    folder = accelerator.save_state(tmp_path / "ckpt")
    assert torch.load(folder / "precision.pt", weights_only=True)["consecutive_skips"] == 3

    again = _fp16(init_scale=4.0, max_consecutive_skips=5)
    model, optimizer = _mlp(again)
    again.load_state(folder)
    assert again.precision.state_dict() == accelerator.precision.state_dict()
    _overflow(again, model, optimizer, 1)
    with pytest.raises(LossScaleOverflowError, match="the last 5 optimizer steps"):
        _overflow(again, model, optimizer, 1)


def test_a_checkpoint_from_before_the_run_of_skips_was_saved_still_loads(tmp_path: Path) -> None:
    accelerator = _fp16(init_scale=4.0)
    model, optimizer = _mlp(accelerator)
    _overflow(accelerator, model, optimizer, 2)
    folder = accelerator.save_state(tmp_path / "ckpt")
    state = torch.load(folder / "precision.pt", weights_only=True)
    del state["consecutive_skips"]
    torch.save(state, folder / "precision.pt")
    manifest = json.loads((folder / "manifest.json").read_text())
    entry = describe_file(folder / "precision.pt")
    manifest["files"]["precision.pt"] = {"size": entry.size, "sha256": entry.sha256}
    (folder / "manifest.json").write_text(json.dumps(manifest))

    again = _fp16(init_scale=4.0)
    _mlp(again)
    again.load_state(folder)
    assert again.step_stats == {"loss_scale": 1.0, "skipped_steps": 2}
    assert again.precision.loss_scaler.consecutive_skips == 0


# --- whether a step ran: a post-step hook where it is exact, found_inf otherwise --------------------------------


def _count_found_inf_reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each time LossScaler reads found_inf back (what each answer was)."""
    reads: list[bool] = []
    original = LossScaler._found_inf

    def counted(self: LossScaler, optimizer: torch.optim.Optimizer) -> bool:
        reads.append(original(self, optimizer))
        return reads[-1]

    monkeypatch.setattr(LossScaler, "_found_inf", counted)
    return reads


def _mixed_batches(
    accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[list[bool], list[bool]]:
    """Three ordinary steps, one overflowing, two ordinary: which were skipped, and which moved the weights."""
    skipped, moved = [], []
    torch.manual_seed(1)
    for overflow in (False, False, False, True, False, False):
        before = [p.detach().clone() for p in model.parameters()]
        _train_step(accelerator, model, optimizer, torch.full((4, 4), 1e6) if overflow else torch.randn(4, 4))
        skipped.append(accelerator.optimizer_step_was_skipped)
        moved.append(any(not torch.equal(a, b) for a, b in zip(before, model.parameters())))
    return skipped, moved


EXPECTED_SKIPS = [False, False, False, True, False, False]


def test_a_step_that_ran_is_known_from_the_hook_without_reading_found_inf(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _count_found_inf_reads(monkeypatch)
    accelerator = _fp16()
    model, optimizer = _mlp(accelerator)
    skipped, moved = _mixed_batches(accelerator, model, optimizer)
    assert skipped == EXPECTED_SKIPS
    assert moved == [not s for s in EXPECTED_SKIPS]
    assert reads == [True]  # only the skipped step confirms with found_inf
    assert accelerator.step_stats["skipped_steps"] == 1


def test_a_fused_optimizer_which_skips_inside_its_own_step_is_read_from_found_inf(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GradScaler calls a fused optimizer's step on every step (it skips inside), so a hook would
    say every step ran: its steps are told by found_inf."""
    reads = _count_found_inf_reads(monkeypatch)
    accelerator = _fp16()
    model, optimizer = _mlp(accelerator, lambda params, lr: torch.optim.AdamW(params, lr=lr, fused=True))
    assert optimizer.optimizer._step_supports_amp_scaling
    skipped, moved = _mixed_batches(accelerator, model, optimizer)
    assert skipped == EXPECTED_SKIPS
    assert moved == [not s for s in EXPECTED_SKIPS]
    assert reads == EXPECTED_SKIPS


def test_an_optimizer_whose_step_runs_no_hooks_is_still_told_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step replaced on the instance bypasses torch's hooks: the hook never fires, found_inf then
    says each step ran, and none is counted as skipped for it."""
    reads = _count_found_inf_reads(monkeypatch)
    accelerator = _fp16()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    raw = torch.optim.SGD(model.parameters(), lr=1e-3)
    unhooked = type(raw).step.__wrapped__  # torch's step without its hook-running wrapper
    raw.step = lambda closure=None: unhooked(raw, closure)  # type: ignore[method-assign]
    model, optimizer = accelerator.prepare(model, raw)
    skipped, moved = _mixed_batches(accelerator, model, optimizer)
    assert skipped == EXPECTED_SKIPS
    assert moved == [not s for s in EXPECTED_SKIPS]
    assert reads == EXPECTED_SKIPS


def test_a_copied_scaler_watches_the_optimizers_it_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watched optimizers are not pickled (weak references): a copy hooks what it steps afresh."""
    accelerator = _fp16()
    model, optimizer = _mlp(accelerator)
    _train_step(accelerator, model, optimizer, torch.randn(4, 4))
    scaler = accelerator.precision.loss_scaler
    for clone in (pickle.loads(pickle.dumps(scaler)), copy.deepcopy(scaler)):
        assert clone.state_dict() == scaler.state_dict()
        reads = _count_found_inf_reads(monkeypatch)
        raw = copy.deepcopy(optimizer.optimizer)  # a copied optimizer keeps no hooks
        for p in raw.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        clone.scaler.scale(torch.ones(()))  # a step follows a scale, as in training
        assert clone.step(raw) is True
        assert reads == []
        monkeypatch.undo()
