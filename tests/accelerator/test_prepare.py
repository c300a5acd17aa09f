"""prepare(): any objects, any order, one call or several; what it refuses and warns about."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.accelerator import AcceleratedOptimizer, AcceleratedScheduler, PreparedDataLoader


def _objects() -> tuple[nn.Module, torch.optim.Optimizer, DataLoader, torch.optim.lr_scheduler.LRScheduler]:
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    return model, optimizer, loader, scheduler


def test_returns_prepared_objects_in_the_order_given_and_passes_others_through() -> None:
    model, optimizer, loader, scheduler = _objects()
    marker = object()
    out = Accelerator().prepare(scheduler, "text", loader, marker, optimizer, model)
    assert isinstance(out[0], AcceleratedScheduler) and out[1] == "text"
    assert isinstance(out[2], PreparedDataLoader) and out[3] is marker
    assert isinstance(out[4], AcceleratedOptimizer) and out[5] is model
    assert out[0].optimizers == [out[4]]


def test_one_object_is_returned_alone() -> None:
    model = nn.Linear(2, 2)
    assert Accelerator().prepare(model) is model


def test_objects_may_come_in_separate_calls() -> None:
    model, optimizer, loader, scheduler = _objects()
    accelerator = Accelerator()
    optimizer = accelerator.prepare(optimizer)
    scheduler = accelerator.prepare(scheduler)
    model = accelerator.prepare(model)
    loader = accelerator.prepare(loader)
    assert scheduler.optimizers == [optimizer]
    for x, y in loader:
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr() == [pytest.approx(0.001)]


def test_preparing_twice_does_not_wrap_twice() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(nn.Linear(2, 2))
    wrapper = model.forward
    assert accelerator.prepare(model) is model
    assert Accelerator(mixed_precision="fp16").prepare(model).forward.__wrapped__ == wrapper.__wrapped__
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=1))
    assert accelerator.prepare(optimizer) is optimizer


def test_backward_before_prepare_raises() -> None:
    with pytest.raises(RuntimeError, match=r"backward\(\) was called before prepare\(\)"):
        Accelerator().backward(torch.ones(1, requires_grad=True).sum())


def test_optimizer_of_another_model_warns_once() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(nn.Linear(2, 2))
    stranger = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1)
    with pytest.warns(UserWarning, match="none of the 2 parameters of SGD belongs to a prepared model"):
        accelerator.prepare(stranger)
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error")
        accelerator.prepare(nn.Linear(3, 3))
    assert model is not None


def test_optimizer_before_its_model_does_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    accelerator = Accelerator()
    model = nn.Linear(2, 2)
    accelerator.prepare(torch.optim.SGD(model.parameters(), lr=1))
    accelerator.prepare(model)
    assert not [w for w in recwarn if "prepared model" in str(w.message)]


def test_dataloader_wrapper_behaves_like_the_loader() -> None:
    _, _, loader, _ = _objects()
    prepared = Accelerator().prepare(loader)
    assert len(prepared) == 2 and prepared.batch_size == 4 and prepared.dataset is loader.dataset
    assert [len(x) for x, _ in prepared] == [4, 4]


def test_empty_dataloader_yields_nothing() -> None:
    loader = DataLoader(TensorDataset(torch.randn(0, 4)), batch_size=4)
    assert list(Accelerator().prepare(loader)) == []


def test_prepared_objects_carry_accelerates_mark_and_others_do_not() -> None:
    model, optimizer, loader, scheduler = _objects()
    other = [1, 2, 3]
    prepared = Accelerator().prepare(model, optimizer, loader, scheduler, other)
    assert [getattr(obj, "_is_accelerate_prepared", False) for obj in prepared] == [True, True, True, True, False]
