"""Accelerate names accel does not implement still import: big-model inference is Accelerate's own
(forwarded when installed, else ImportError naming the install when used); the rest refuse when used."""

from __future__ import annotations

import importlib
import importlib.util

import pytest
import torch

accelerate = pytest.importorskip("accelerate", reason="accelerate is in accel's test extra (pip install -e '.[test]')")
for _module in ("accelerate.big_modeling", "accelerate.hooks", "accelerate.utils.modeling"):
    importlib.import_module(_module)


def test_big_model_inference_names_are_accelerates_own_when_it_is_installed() -> None:
    import accel.hooks
    import accel.utils.modeling
    from accel import infer_auto_device_map, load_checkpoint_and_dispatch
    from accel.big_modeling import cpu_offload_with_hook

    assert infer_auto_device_map is accelerate.utils.modeling.infer_auto_device_map
    assert load_checkpoint_and_dispatch is accelerate.big_modeling.load_checkpoint_and_dispatch
    assert cpu_offload_with_hook is accelerate.big_modeling.cpu_offload_with_hook
    assert accel.hooks.remove_hook_from_module is accelerate.hooks.remove_hook_from_module
    assert accel.utils.modeling.load_checkpoint_in_model is accelerate.utils.modeling.load_checkpoint_in_model
    # and they work on a plain model beside accel
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    assert set(infer_auto_device_map(model, max_memory={"cpu": 10**9}).values()) == {"cpu"}


def test_without_accelerate_they_import_and_say_what_to_install_when_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import accel.hooks

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "accelerate" else find_spec(name, *args))
    from accel import infer_auto_device_map
    from accel.big_modeling import dispatch_model

    for stand_in, name in ((infer_auto_device_map, "accel.utils.modeling.infer_auto_device_map"),
                           (dispatch_model, "accel.big_modeling.dispatch_model"),
                           (accel.hooks.attach_align_device_hook, "accel.hooks.attach_align_device_hook")):
        with pytest.raises(ImportError, match=rf"{name} is Accelerate's .*pip install accelerate"):
            stand_in(torch.nn.Linear(2, 2))


def test_names_accel_refuses_import_and_say_why_when_used() -> None:
    from accel.data_loader import DataLoaderDispatcher, DataLoaderStateMixin
    from accel.tracking import CometMLTracker

    with pytest.raises(NotImplementedError, match=r"CometMLTracker is not supported by accel: .*GeneralTracker subclass"):
        CometMLTracker("run")
    with pytest.raises(NotImplementedError, match=r"DataLoaderDispatcher is built by prepare: .*dispatch_batches=True"):
        DataLoaderDispatcher(range(4), batch_size=2)
    assert not isinstance(torch.utils.data.DataLoader(range(4)), DataLoaderStateMixin)


def test_a_prepared_loader_that_dispatches_is_a_data_loader_dispatcher_and_one_that_shards_is_not() -> None:
    from accel import Accelerator, DataLoaderConfiguration
    from accel.data_loader import DataLoaderDispatcher, DataLoaderShard

    loader = torch.utils.data.DataLoader(torch.arange(8.0), batch_size=2)
    for dispatch in (True, False):
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
        prepared = accelerator.prepare(loader)
        assert isinstance(prepared, DataLoaderShard)
        assert isinstance(prepared, DataLoaderDispatcher) is dispatch
    assert not isinstance(loader, DataLoaderDispatcher)


def test_unknown_names_are_still_attribute_errors() -> None:
    import accel
    import accel.big_modeling
    import accel.data_loader

    for module, name in ((accel, "no_such_thing"), (accel.big_modeling, "no_such_thing"), (accel.data_loader, "Nope")):
        with pytest.raises(AttributeError):
            getattr(module, name)


def test_accelerate_utils_big_model_names_are_forwarded_too() -> None:
    from accel.utils import has_offloaded_params, load_checkpoint_in_model

    assert has_offloaded_params is accelerate.utils.has_offloaded_params
    assert load_checkpoint_in_model is accelerate.utils.load_checkpoint_in_model
    assert has_offloaded_params(torch.nn.Linear(2, 2)) is False
