"""True-precision backends: the model, its inputs and the default dtype follow the precision."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from accel import Accelerator


@pytest.mark.parametrize(
    ("name", "dtype"), [("16-true", torch.float16), ("bf16-true", torch.bfloat16), ("64-true", torch.float64)]
)
def test_weights_inputs_and_outputs_in_the_dtype(name: str, dtype: torch.dtype) -> None:
    accelerator = Accelerator(mixed_precision=name)
    model = accelerator.prepare(nn.Linear(4, 4))
    assert model.weight.dtype == dtype
    assert model(torch.randn(2, 4)).dtype == dtype
    assert model(torch.arange(4).float().unsqueeze(0), ).dtype == dtype


def test_integer_inputs_are_not_cast() -> None:
    accelerator = Accelerator(mixed_precision="64-true")
    model = accelerator.prepare(nn.Embedding(10, 4))
    assert model(torch.tensor([1, 2])).dtype == torch.float64


def test_init_module_builds_in_the_dtype_and_restores_default() -> None:
    accelerator = Accelerator(mixed_precision="bf16-true")
    with accelerator.init_module():
        model = nn.Linear(4, 4)
    assert model.weight.dtype == torch.bfloat16
    assert torch.get_default_dtype() == torch.float32


def test_contexts_restore_default_dtype_on_error() -> None:
    accelerator = Accelerator(mixed_precision="64-true")
    for context in (accelerator.init_module, accelerator.autocast):
        with pytest.raises(RuntimeError, match="boom"), context():
            assert torch.get_default_dtype() == torch.float64
            raise RuntimeError("boom")
        assert torch.get_default_dtype() == torch.float32


def test_optimizer_prepared_before_model_still_trains_the_cast_weights() -> None:
    accelerator = Accelerator(mixed_precision="64-true")
    model = nn.Linear(4, 1)
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    model = accelerator.prepare(model)
    before = model.weight.detach().clone()
    accelerator.backward(model(torch.randn(8, 4)).pow(2).mean())
    optimizer.step()
    assert model.weight.dtype == torch.float64 and not torch.equal(before, model.weight)


def test_prepared_true_precision_model_pickles() -> None:
    accelerator = Accelerator(mixed_precision="64-true")
    model = accelerator.prepare(nn.Linear(4, 2))
    clone = pickle.loads(pickle.dumps(model))
    x = torch.randn(3, 4)
    assert torch.equal(clone(x), model(x))


def test_16_true_refuses_an_adam_eps_that_rounds_to_zero() -> None:
    accelerator = Accelerator(mixed_precision="16-true")
    model = accelerator.prepare(nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['eps'\]=1e-08 rounds to 0 in fp16"):
        accelerator.prepare(torch.optim.Adam(model.parameters()))
    optimizer = accelerator.prepare(torch.optim.Adam(model.parameters(), eps=1e-6))
    x = torch.zeros(2, 4)
    x[:, 0] = 1.0  # weight columns 1-3 get exactly zero gradient
    accelerator.backward(model(x).pow(2).mean())
    optimizer.step()
    assert torch.isfinite(model.weight).all()


def test_other_true_precisions_accept_default_adam() -> None:
    for name in ("bf16-true", "64-true"):
        accelerator = Accelerator(mixed_precision=name)
        model = accelerator.prepare(nn.Linear(2, 2))
        accelerator.prepare(torch.optim.Adam(model.parameters()))
