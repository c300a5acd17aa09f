"""Accelerate's constructor options and properties on the Accelerator: honoured, or refused at construction."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.utils import DataLoaderConfiguration, DistributedType, GradientAccumulationPlugin


def test_properties_in_one_process() -> None:
    accelerator = Accelerator()
    assert accelerator.distributed_type is DistributedType.NO
    assert accelerator.use_distributed is False and accelerator.is_last_process is True
    assert accelerator.state.mixed_precision == "no" and accelerator.state.device == accelerator.device
    assert accelerator.split_batches is False and accelerator.even_batches is True
    assert accelerator.scaler is None and accelerator.native_amp is False
    assert accelerator.trackers == [] and accelerator.logging_dir is None


def test_fp16_exposes_torchs_grad_scaler_and_autocast() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    assert isinstance(accelerator.scaler, torch.amp.GradScaler) and accelerator.scaler.get_scale() == 65536.0
    assert accelerator.native_amp is True and accelerator.state.mixed_precision == "fp16"


def test_older_dataloader_keywords_build_the_configuration() -> None:
    accelerator = Accelerator(split_batches=True, even_batches=False)
    assert accelerator.dataloader_config == DataLoaderConfiguration(split_batches=True, even_batches=False)
    assert accelerator.split_batches is True and accelerator.even_batches is False


def test_dataloader_config_and_older_keywords_together_are_refused() -> None:
    with pytest.raises(ValueError, match="give these fields in the DataLoaderConfiguration only"):
        Accelerator(dataloader_config=DataLoaderConfiguration(), even_batches=False)
    with pytest.raises(TypeError, match="give a DataLoaderConfiguration"):
        Accelerator(dataloader_config={"split_batches": True})  # type: ignore[arg-type]


def test_a_dataloader_option_accel_cannot_honour_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"data_seed=3\) has no effect"):
        Accelerator(dataloader_config=DataLoaderConfiguration(data_seed=3))


def test_use_stateful_dataloader_is_accepted_without_torchdata() -> None:
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    assert Accelerator(dataloader_config=config).use_stateful_dataloader is True
    assert Accelerator().use_stateful_dataloader is False


def test_the_accumulation_plugin_sets_the_steps() -> None:
    accelerator = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=4))
    assert accelerator.gradient_accumulation_steps == 4
    with pytest.raises(ValueError, match="give the number of steps in one place only"):
        Accelerator(gradient_accumulation_steps=2, gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2))
    # adjust_scheduler=False is Accelerate's option too: accepted (tests/training/test_scheduler.py)
    assert Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2, adjust_scheduler=False))


def _sync_pattern(plugin: GradientAccumulationPlugin, batches: int) -> list[bool]:
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    model = accelerator.prepare(nn.Linear(1, 1))
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.ones(batches, 1)), batch_size=1))
    pattern = []
    for _ in range(2):
        for (x,) in loader:
            with accelerator.accumulate(model):
                pattern.append(accelerator.sync_gradients)
    return pattern


def test_sync_with_dataloader_false_carries_the_window_over_the_epoch_end() -> None:
    assert _sync_pattern(GradientAccumulationPlugin(num_steps=2), 3) == [False, True, True] * 2
    assert _sync_pattern(GradientAccumulationPlugin(num_steps=2, sync_with_dataloader=False), 3) == [
        False, True, False, True, False, True
    ]


def test_rng_types_are_checked_by_name() -> None:
    assert Accelerator(rng_types=["torch", "generator"]).rng_types == ["torch", "generator"]
    with pytest.raises(ValueError, match="unknown \\['cpu'\\]"):
        Accelerator(rng_types=["cpu"])


@pytest.mark.parametrize("backend", [None, "no", "NO"])
def test_dynamo_backend_no_compiles_nothing(backend: str | None) -> None:
    model = nn.Linear(2, 2)
    assert Accelerator(dynamo_backend=backend).prepare(model) is model


def test_prepare_methods_take_accelerates_keywords() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare_model(nn.Linear(2, 2), device_placement=False, evaluation_mode=True)
    optimizer = accelerator.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), device_placement=True)
    loader = accelerator.prepare_data_loader(DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2))
    assert len(loader) == 2 and optimizer.optimizer.param_groups[0]["lr"] == 0.1
    halves = accelerator.prepare_data_loader(  # accepted; as in Accelerate it cuts only dispatched batches
        DataLoader(torch.arange(4), batch_size=2), slice_fn_for_dispatch=lambda batch, rows, **_: batch[:1])
    assert halves.config.dispatch_batches is None and [b.tolist() for b in halves] == [[0, 1], [2, 3]]


def test_free_memory_forgets_what_was_prepared() -> None:
    accelerator = Accelerator()
    layer = nn.Linear(2, 2)
    model, optimizer = accelerator.prepare(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    assert accelerator.free_memory(model, optimizer) == [None, None]
    assert accelerator._models == [] and accelerator._optimizers == []
    assert accelerator.clear() == []


def test_triggers_in_one_process() -> None:
    accelerator = Accelerator()
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.check_trigger() is True and accelerator.check_trigger() is False


def test_decorators_run_here_in_one_process() -> None:
    accelerator = Accelerator()
    assert accelerator.on_last_process(lambda: 1)() == 1
    assert accelerator.on_process(process_index=0)(lambda: 2)() == 2
    assert accelerator.on_process(lambda: 3, process_index=1)() is None
    with accelerator.local_main_process_first(), accelerator.split_between_processes([1, 2, 3]) as share:
        assert share == [1, 2, 3]


def test_cpu_false_does_not_undo_the_launchers_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_USE_CPU", "1")
    assert Accelerator(cpu=False).device.type == "cpu"
    with pytest.raises(TypeError, match="cpu='yes'"):
        Accelerator(cpu="yes")  # type: ignore[arg-type]


def test_even_batches_is_settable_and_later_loaders_follow_it() -> None:
    accelerator = Accelerator()
    accelerator.even_batches = False
    assert accelerator.dataloader_config.even_batches is False
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2))
    assert loader.config.even_batches is False
    with pytest.raises(TypeError):
        accelerator.even_batches = "no"  # type: ignore[assignment]


def test_prepare_takes_one_device_placement_per_object() -> None:
    accelerator = Accelerator()
    layer = nn.Linear(2, 2)
    model, optimizer = accelerator.prepare(layer, torch.optim.SGD(layer.parameters(), lr=0.1),
                                           device_placement=[False, True])
    assert model is layer
    with pytest.raises(ValueError, match="one True/False per object"):
        accelerator.prepare(nn.Linear(1, 1), device_placement=[True, False])
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2))
    assert accelerator.prepare(loader) is loader
