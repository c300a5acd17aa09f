"""prepare() and optimizers: one optimizer given twice gets one wrapper; an optimizer that trains
no prepared model is refused where it can never train it (true 16-bit precisions)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from accel import Accelerator


def test_the_same_optimizer_twice_in_one_call_gets_one_wrapper() -> None:
    accelerator = Accelerator()
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, first, second = accelerator.prepare(model, optimizer, optimizer)
    assert first is second
    assert accelerator._optimizers == [first]
    before = model.weight.detach().clone()
    accelerator.backward(model(torch.ones(1, 2)).sum())
    second.step()
    assert torch.allclose(model.weight, before - 0.5)


def test_the_same_optimizer_in_a_later_call_gets_the_first_wrapper() -> None:
    accelerator = Accelerator()
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, wrapped = accelerator.prepare(model, optimizer)
    assert accelerator.prepare(optimizer) is wrapped
    assert accelerator._optimizers == [wrapped]


@pytest.mark.parametrize("precision", ["16-true", "bf16-true"])
def test_an_optimizer_of_no_prepared_model_is_refused_in_true_16_bit(precision: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 16-bit is slow on this CPU
        accelerator = Accelerator(mixed_precision=precision)
    model = nn.Linear(2, 2)
    stranger = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1)
    refused = f"none of the 2 parameters of SGD belongs to a prepared model. With mixed_precision='{precision}'"
    with pytest.raises(ValueError, match=refused):
        accelerator.prepare(model, stranger)
    assert accelerator._optimizers == []


def test_in_true_16_bit_an_optimizer_of_the_prepared_model_is_accepted() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accelerator = Accelerator(mixed_precision="bf16-true")
    model = nn.Linear(2, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1))
    assert model.weight.dtype == torch.bfloat16
    assert optimizer.param_groups[0]["params"][0] is model.weight


def test_in_fp32_an_optimizer_of_no_prepared_model_still_only_warns() -> None:
    accelerator = Accelerator()
    with pytest.warns(UserWarning, match="none of the 2 parameters of SGD belongs to a prepared model"):
        accelerator.prepare(nn.Linear(2, 2), torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1))
