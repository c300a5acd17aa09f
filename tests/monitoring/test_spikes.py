"""Loss-spike detection in real training loops (accel/monitoring/spikes.py): log, checkpoint, stop."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, LossSpikeError, SpikeDetectionKwargs
from accel.monitoring import SpikeDetector

SPIKE_STEP = 60


def _setup(accelerator: Accelerator) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    return accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))  # type: ignore[no-any-return]


def _train(
    accelerator: Accelerator, steps: int, spike_at: int | None = None, before_step: dict[int, dict[str, Any]] | None = None
) -> None:
    """Noisy regression (a fresh batch of 64 each step); at `spike_at` the loss's value is 50 times higher (its
    gradient unchanged, so that training goes on as before and the steps after are normal)."""
    model, optimizer = _setup(accelerator)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(64, 8, generator=generator)
        y = x.sum(dim=1, keepdim=True) + 0.3 * torch.randn(64, 1, generator=generator)
        loss = (model(x) - y).square().mean()
        if step == spike_at:
            loss = loss + 49 * loss.detach()
        if before_step is not None:
            before_step[step] = {k: v.clone() for k, v in model.state_dict().items()}
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def test_normal_runs_have_no_spike() -> None:
    accelerator = Accelerator(kwarg_handlers=[SpikeDetectionKwargs()])
    _train(accelerator, steps=300)
    detector = accelerator.spike_detector
    assert detector is not None and detector.spikes == [] and detector.step == 300


def test_a_spike_is_logged_at_its_step_and_training_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    accelerator = Accelerator(kwarg_handlers=[SpikeDetectionKwargs()])
    with caplog.at_level(logging.WARNING, logger="accel.monitoring"):
        _train(accelerator, steps=80, spike_at=SPIKE_STEP)
    assert accelerator.spike_detector is not None
    assert [spike.step for spike in accelerator.spike_detector.spikes] == [SPIKE_STEP]
    assert f"loss spike at optimizer step {SPIKE_STEP}" in caplog.text
    assert accelerator.spike_detector.step == 80


def test_checkpoint_saves_the_weights_from_before_the_spike_update(tmp_path: Path) -> None:
    accelerator = Accelerator(
        project_dir=tmp_path, kwarg_handlers=[SpikeDetectionKwargs(action="checkpoint")]
    )
    before: dict[int, dict[str, Any]] = {}
    _train(accelerator, steps=70, spike_at=SPIKE_STEP, before_step=before)
    folder = tmp_path / "spikes" / f"spike_step_{SPIKE_STEP}"
    assert folder.is_dir() and [p.name for p in (tmp_path / "spikes").iterdir()] == [folder.name]
    model = accelerator.prepared.models[0]
    assert not torch.equal(model.state_dict()["0.weight"], before[SPIKE_STEP]["0.weight"])
    accelerator.load_state(folder)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[SPIKE_STEP][name]), name


def test_stop_raises_at_the_spike_before_its_update() -> None:
    accelerator = Accelerator(kwarg_handlers=[SpikeDetectionKwargs(action="stop")])
    before: dict[int, dict[str, Any]] = {}
    with pytest.raises(LossSpikeError, match=f"loss spike at optimizer step {SPIKE_STEP}.*action='stop'"):
        _train(accelerator, steps=80, spike_at=SPIKE_STEP, before_step=before)
    model = accelerator.prepared.models[0]
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[SPIKE_STEP][name]), name


def test_a_non_finite_loss_is_a_spike_even_in_warmup() -> None:
    detector = SpikeDetector(SpikeDetectionKwargs(), distributed=False, on_spike=lambda spike: None)
    detector.observe(torch.tensor(1.0), ends_step=True)
    detector.observe(torch.tensor(float("nan")), ends_step=True)
    assert [spike.step for spike in detector.spikes] == [1]


def test_accumulation_names_the_optimizer_step_and_micro_batch() -> None:
    detector = SpikeDetector(SpikeDetectionKwargs(window=10, warmup=4), distributed=False, on_spike=lambda s: None)
    for micro_batch in range(12):
        loss = 100.0 if micro_batch == 9 else 1.0 + 0.01 * (micro_batch % 3)
        detector.observe(torch.tensor(loss), ends_step=micro_batch % 2 == 1)
    assert [(spike.step, spike.micro_batch) for spike in detector.spikes] == [(4, 9)]


def test_the_setting_turns_it_on_and_checkpoint_needs_a_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_SPIKE_DETECTION", "stop")
    accelerator = Accelerator()
    assert accelerator.spike_detector is not None and accelerator.spike_detector.options.action == "stop"
    monkeypatch.setenv("ACCEL_SPIKE_DETECTION", "checkpoint")
    with pytest.raises(ValueError, match="nowhere to save.*project_dir"):
        Accelerator()
    monkeypatch.delenv("ACCEL_SPIKE_DETECTION")
    assert Accelerator().spike_detector is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"action": "halt"}, "action='halt'"),
        ({"window": 1}, "window=1"),
        ({"window": 10, "warmup": 20}, "warmup=20 is more than window=10"),
        ({"threshold": 0}, "threshold=0"),
        ({"min_rise": -1}, "min_rise=-1"),
        ({"checkpoint_dir": 3}, "checkpoint_dir=3"),
    ],
)
def test_bad_options_raise_naming_the_field(options: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        SpikeDetectionKwargs(**options)
