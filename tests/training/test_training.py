"""Training through accel gives the hand-written loop's results: exactly in fp32."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from tests_helpers import make_regression


def _hand_loop(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (1 + 0.01 * s))
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)


def _accel_loop(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> Accelerator:
    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (1 + 0.01 * s))
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return accelerator


def test_fp32_is_bit_identical_to_the_hand_written_loop() -> None:
    model, x, y = make_regression()
    reference = copy.deepcopy(model)
    _hand_loop(reference, x, y, steps=25)
    _accel_loop(model, x, y, steps=25)
    for (name, a), b in zip(reference.named_parameters(), model.parameters()):
        assert torch.equal(a, b), name


def test_fp32_training_reduces_the_loss() -> None:
    model, x, y = make_regression()
    before = nn.functional.mse_loss(model(x), y).item()
    _accel_loop(model, x, y, steps=50)
    assert nn.functional.mse_loss(model(x), y).item() < 0.5 * before


def _accumulated(model: nn.Module, x: torch.Tensor, y: torch.Tensor, micro: int) -> None:
    accelerator = Accelerator(gradient_accumulation_steps=micro)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for step in range(2 * micro):
        chunk = step % micro
        xs, ys = x.chunk(micro)[chunk], y.chunk(micro)[chunk]
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(xs), ys))
            assert accelerator.sync_gradients == (chunk == micro - 1)
            optimizer.step()
            optimizer.zero_grad()


def test_accumulating_4_micro_batches_matches_one_step_on_the_4x_batch() -> None:
    model, x, y = make_regression()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        nn.functional.mse_loss(reference(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    _accumulated(model, x, y, micro=4)
    for a, b in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_scheduler_and_zero_grad_act_only_on_sync_micro_batches() -> None:
    model, x, y = make_regression()
    accelerator = Accelerator(gradient_accumulation_steps=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    lrs = []
    for _ in range(6):
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            grad_kept = model[0].weight.grad is not None
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            assert grad_kept
            assert (model[0].weight.grad is None) == accelerator.sync_gradients
            lrs.append(scheduler.get_last_lr()[0])
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25]


def test_last_batch_of_the_dataloader_syncs_a_partial_window() -> None:
    model, x, y = make_regression()
    accelerator = Accelerator(gradient_accumulation_steps=4)
    loader = DataLoader(TensorDataset(x, y), batch_size=10)  # 7 batches: windows of 4 and 3
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    syncs = []
    for _ in range(2):
        for xb, yb in loader:
            with accelerator.accumulate(model):
                accelerator.backward(nn.functional.mse_loss(model(xb), yb))
                syncs.append(accelerator.sync_gradients)
                optimizer.step()
                optimizer.zero_grad()
    epoch = [False, False, False, True, False, False, True]
    assert syncs == epoch + epoch


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_steps_every_call_when_not_tied_to_the_optimizer() -> None:
    model, x, y = make_regression()
    accelerator = Accelerator(gradient_accumulation_steps=2, step_scheduler_with_optimizer=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for _ in range(2):
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            scheduler.step()
    assert scheduler.get_last_lr() == [0.25]
