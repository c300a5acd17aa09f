"""Throughput and MFU of real training loops through the Accelerator (accel/monitoring/throughput.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tests_helpers import Recorder
from tiny_transformer import loss_of, make_transformer, token_batch
from torch import nn

from accel import Accelerator, ThroughputKwargs

IN, HIDDEN, OUT, BATCH = 32, 64, 8, 4
MLP_FLOPS_PER_SAMPLE = 2 * (IN * HIDDEN + HIDDEN * OUT) + 2 * 2 * HIDDEN * OUT + 2 * IN * HIDDEN
"""Forward (2 per multiply-add of both layers), backward of layer 2 (input and weight gradients) and of layer 1
(weight gradient only: its input needs none)."""



def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def _train_mlp(accelerator: Accelerator, steps: int, accumulate: int = 1) -> nn.Module:
    model = _mlp()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    for _ in range(steps * accumulate):
        with accelerator.accumulate(model):
            loss = model(torch.randn(BATCH, IN)).square().mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    return model


def test_the_first_step_flops_are_counted_exactly_and_each_window_is_logged() -> None:
    recorder = Recorder()
    accelerator = Accelerator(log_with=[recorder], kwarg_handlers=[ThroughputKwargs(log_every=3, peak_flops=1e9)])
    accelerator.init_trackers("throughput")
    _train_mlp(accelerator, steps=7)
    monitor = accelerator.throughput_monitor
    assert monitor is not None and monitor.steps == 7
    assert monitor.flops_per_sample == MLP_FLOPS_PER_SAMPLE and monitor.flops_per_token is None
    # the first step is not timed: windows end at steps 4 and 7
    assert [step for _, step in recorder.logged] == [4, 7]
    assert monitor.latest_window == (5, 7)  # the steps the numbers cover
    values = recorder.logged[-1][0]
    assert values == accelerator.throughput
    assert "throughput/tokens_per_s" not in values  # float inputs carry no tokens
    samples_per_s = values["throughput/samples_per_s"]
    assert samples_per_s == pytest.approx(BATCH / values["throughput/step_time_s"], rel=1e-6)
    flops_per_s = samples_per_s * MLP_FLOPS_PER_SAMPLE
    assert values["throughput/tflops_per_device"] == pytest.approx(flops_per_s / 1e12, rel=1e-6)
    assert values["throughput/mfu"] == pytest.approx(flops_per_s / 1e9, rel=1e-6)


def test_token_ids_give_tokens_per_second_and_a_formula_replaces_the_count() -> None:
    accelerator = Accelerator(kwarg_handlers=[ThroughputKwargs(log_every=2, flops_per_token=1000.0, peak_flops=1e9)])
    model = make_transformer()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for step in range(5):
        inputs, targets = token_batch(step)
        accelerator.backward(loss_of(model, inputs, targets))
        optimizer.step()
        optimizer.zero_grad()
    values = accelerator.throughput
    tokens_per_step = inputs.numel()
    assert values["throughput/tokens_per_s"] == pytest.approx(tokens_per_step / values["throughput/step_time_s"])
    assert values["throughput/mfu"] == pytest.approx(values["throughput/tokens_per_s"] * 1000.0 / 1e9)
    assert accelerator.throughput_monitor is not None and accelerator.throughput_monitor.flops_per_token == 1000.0


def test_a_length_function_counts_tokens_and_evaluation_calls_are_not_counted() -> None:
    handler = ThroughputKwargs(log_every=2, length_fn=lambda batch: 10 * batch.shape[0], count_flops=False)
    accelerator = Accelerator(kwarg_handlers=[handler])
    model = _mlp()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    for _ in range(3):
        model.eval()
        model(torch.randn(100, IN))  # evaluation: not training samples
        model.train()
        accelerator.backward(model(torch.randn(BATCH, IN)).sum())
        optimizer.step()
    values = accelerator.throughput
    assert values["throughput/tokens_per_s"] == pytest.approx(10 * values["throughput/samples_per_s"])
    assert values["throughput/samples_per_s"] == pytest.approx(BATCH / values["throughput/step_time_s"])
    assert "throughput/mfu" not in values  # count_flops=False and no formula


def test_accumulation_counts_one_step_per_optimizer_update() -> None:
    accelerator = Accelerator(gradient_accumulation_steps=2, kwarg_handlers=[ThroughputKwargs(log_every=2)])
    _train_mlp(accelerator, steps=3, accumulate=2)
    monitor = accelerator.throughput_monitor
    assert monitor is not None and monitor.steps == 3
    # the FLOPs of one step (two micro-batches) over its samples: still the per-sample figure
    assert monitor.flops_per_sample == MLP_FLOPS_PER_SAMPLE
    values = accelerator.throughput
    assert values["throughput/samples_per_s"] == pytest.approx(2 * BATCH / values["throughput/step_time_s"])


def test_off_hooks_nothing_and_the_setting_turns_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator = Accelerator()
    model = _mlp()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    assert accelerator.throughput_monitor is None and accelerator.throughput == {}
    assert not model._forward_pre_hooks and not optimizer.optimizer._optimizer_step_post_hooks
    monkeypatch.setenv("ACCEL_LOG_THROUGHPUT", "true")
    accelerator = Accelerator()
    assert accelerator.throughput_monitor is not None
    assert accelerator.throughput_monitor.options == ThroughputKwargs()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"log_every": 0}, "log_every=0"),
        ({"flops_per_token": -1.0}, "flops_per_token=-1.0"),
        ({"peak_flops": float("inf")}, "peak_flops=inf"),
        ({"flops_per_token": 1.0, "flops_per_sample": 1.0}, "both"),
        ({"length_fn": 3}, "length_fn=3"),
    ],
)
def test_bad_options_raise_naming_the_field(options: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        ThroughputKwargs(**options)


def test_without_a_prepared_optimizer_no_flop_count_is_left_running() -> None:
    accelerator = Accelerator(kwarg_handlers=[ThroughputKwargs()])
    model = accelerator.prepare(_mlp())
    model(torch.randn(BATCH, IN)).sum().backward()
    monitor = accelerator.throughput_monitor
    assert monitor is not None and monitor._counter is None and monitor.steps == 0
