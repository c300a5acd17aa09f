"""AcceleratedOptimizer: shares state with the user's optimizer, unscales once, pickles."""

from __future__ import annotations

import pickle

import torch
from torch import nn

from accel import Accelerator, GradScalerKwargs


def test_param_groups_and_state_are_the_wrapped_optimizers() -> None:
    model = nn.Linear(2, 1)
    inner = torch.optim.Adam(model.parameters(), lr=0.1)
    accelerator = Accelerator()
    model, optimizer = accelerator.prepare(model, inner)
    accelerator.backward(model(torch.randn(3, 2)).sum())
    optimizer.step()
    assert optimizer.param_groups is inner.param_groups and optimizer.state is inner.state
    optimizer.param_groups[0]["lr"] = 0.5
    assert inner.param_groups[0]["lr"] == 0.5
    assert optimizer.state_dict()["state"].keys() == inner.state_dict()["state"].keys()
    assert isinstance(optimizer, torch.optim.Optimizer)


def test_clip_grad_norm_twice_unscales_once_and_returns_the_true_norm() -> None:
    model = nn.Linear(4, 1, bias=False)
    accelerator = Accelerator(mixed_precision="fp16", kwarg_handlers=[GradScalerKwargs(init_scale=1024)])
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(model(torch.ones(1, 4)).sum())
    first = accelerator.clip_grad_norm_(model.parameters(), 100.0)
    second = accelerator.clip_grad_norm_(model.parameters(), 100.0)
    assert first is not None and second is not None
    torch.testing.assert_close(first, torch.tensor(2.0))
    torch.testing.assert_close(second, torch.tensor(2.0))
    optimizer.step()
    assert not optimizer.step_was_skipped
    optimizer.zero_grad()
    accelerator.backward(model(torch.ones(1, 4)).sum())
    torch.testing.assert_close(accelerator.clip_grad_norm_(model.parameters(), 1.0), torch.tensor(2.0))
    torch.testing.assert_close(model.weight.grad, torch.full((1, 4), 0.5), rtol=1e-4, atol=1e-4)


def test_clip_grad_value_unscales_first() -> None:
    model = nn.Linear(4, 1, bias=False)
    accelerator = Accelerator(mixed_precision="fp16", kwarg_handlers=[GradScalerKwargs(init_scale=1024)])
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(model(torch.full((1, 4), 3.0)).sum())
    accelerator.clip_grad_value_(model.parameters(), 2.0)
    torch.testing.assert_close(model.weight.grad, torch.full((1, 4), 2.0))


def test_clipping_waits_for_the_sync_micro_batch() -> None:
    model = nn.Linear(4, 1, bias=False)
    accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=2)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    norms = []
    for _ in range(2):
        with accelerator.accumulate(model):
            accelerator.backward(model(torch.ones(1, 4)).sum())
            norms.append(accelerator.clip_grad_norm_(model.parameters(), 100.0))
            optimizer.step()
            optimizer.zero_grad()
    assert norms[0] is None
    torch.testing.assert_close(norms[1], torch.tensor(2.0))
    assert not accelerator.optimizer_step_was_skipped


def test_prepared_optimizer_pickles() -> None:
    model = nn.Linear(2, 1)
    accelerator = Accelerator()
    _, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.3))
    clone = pickle.loads(pickle.dumps(optimizer))
    assert clone.param_groups[0]["lr"] == 0.3


def test_attributes_are_forwarded() -> None:
    model = nn.Linear(2, 1)
    optimizer = Accelerator().prepare(torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9))
    assert optimizer.defaults["momentum"] == 0.9
    calls = []
    optimizer.register_step_post_hook(lambda opt, args, kwargs: calls.append(1))
    model(torch.randn(1, 2)).sum().backward()
    optimizer.step()
    assert calls == [1]


def test_a_step_marked_skipped_the_way_accelerates_tests_mark_it_holds_the_schedule() -> None:
    # Accelerate's tests (and code written for it) set optimizer._is_overflow to say the step was skipped.
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / 10)
    accelerator = Accelerator()
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    optimizer._is_overflow = True
    scheduler.step()
    assert optimizer.step_was_skipped and scheduler.get_last_lr() == [1.0]
    optimizer._is_overflow = False
    scheduler.step()
    assert scheduler.get_last_lr() == [0.9]
