"""accelerator.prepared, the registry of what was prepared, and the private lists kept as its views."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.training.prepared import PreparedObjects


def _objects() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, DataLoader]:
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)
    return model, optimizer, scheduler, loader


def test_prepare_records_each_object_by_kind_in_order() -> None:
    accelerator = Accelerator(cpu=True)
    model, optimizer, scheduler, loader = accelerator.prepare(*_objects())
    second = accelerator.prepare(nn.Linear(2, 2))
    prepared = accelerator.prepared
    assert prepared.models == [model, second]
    assert prepared.optimizers == [optimizer] and prepared.schedulers == [scheduler] and prepared.dataloaders == [loader]
    assert accelerator._models is prepared.models and accelerator._optimizers is prepared.optimizers
    assert accelerator._schedulers is prepared.schedulers and accelerator._dataloaders is prepared.dataloaders


def test_assigning_a_private_list_replaces_the_registrys() -> None:
    """Published scripts assign `accelerator._models`; what they assign is what checkpoints store."""
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 1))
    replacement = [model]
    accelerator._models = replacement
    assert accelerator.prepared.models is replacement


def test_registered_objects_and_hooks_are_in_the_registry_and_outlive_free_memory() -> None:
    class Counter:
        def state_dict(self) -> dict[str, int]:
            return {"n": 1}

        def load_state_dict(self, state: dict[str, int]) -> None:
            pass

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(*_objects())
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    handle = accelerator.register_save_state_pre_hook(lambda models, weights, folder: None)
    assert accelerator.prepared.registered == [counter] and accelerator._custom_objects == [counter]
    assert list(accelerator.prepared.save_hooks) == [handle.id]
    accelerator.free_memory()
    assert accelerator.prepared.models == [] and accelerator.prepared.optimizers == []
    assert accelerator.prepared.registered == [counter] and len(accelerator.prepared.save_hooks) == 1


def test_a_registry_starts_empty() -> None:
    prepared = PreparedObjects()
    assert (prepared.models, prepared.optimizers, prepared.schedulers, prepared.dataloaders, prepared.registered) == (
        [], [], [], [], []
    )


def test_assigning_something_other_than_a_list_is_refused_naming_the_attribute() -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(TypeError, match=r"accelerator._models = .*give a list .*not Linear"):
        accelerator._models = nn.Linear(2, 2)  # type: ignore[assignment]
    assert accelerator.prepared.models == []
