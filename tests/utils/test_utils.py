"""accel.utils: every name Accelerate scripts import from accelerate.utils, and what each does in one
process (the 2-process results are in tests/distributed/two_processes/test_partial_state.py)."""

from __future__ import annotations

import datetime
import importlib

import pytest
import torch

import accel
import accel.utils as utils


def test_every_exported_name_imports_and_is_the_implementation() -> None:
    for name in utils.__all__:
        assert getattr(utils, name) is not None, name
    from accel.checkpointing import ProjectConfiguration
    from accel.training.out_of_memory import find_executable_batch_size
    from accel.kwargs_handlers import FP8RecipeKwargs

    assert utils.ProjectConfiguration is ProjectConfiguration is accel.ProjectConfiguration
    assert utils.FP8RecipeKwargs is FP8RecipeKwargs and utils.find_executable_batch_size is find_executable_batch_size
    assert utils.DistributedType is accel.DistributedType and utils.DataLoaderConfiguration is accel.DataLoaderConfiguration
    assert utils.LoggerType.TENSORBOARD == "tensorboard"


def test_accelerates_module_paths_work() -> None:
    assert importlib.import_module("accel.utils.dataclasses").GradientAccumulationPlugin is utils.GradientAccumulationPlugin
    assert importlib.import_module("accel.utils.memory").release_memory is utils.release_memory
    assert importlib.import_module("accel.utils.random").set_seed is utils.set_seed
    assert importlib.import_module("accel.utils.operations").gather is utils.gather
    state = importlib.import_module("accel.state")
    assert state.PartialState is accel.PartialState and state.AcceleratorState is accel.AcceleratorState


def test_the_functional_collectives_in_one_process() -> None:
    data = {"x": torch.tensor([1.0, 2.0])}
    assert utils.gather(data) is data
    assert utils.gather_object(["a"]) == ["a"] and utils.gather_object(3) == [3]
    assert utils.broadcast(data) is data
    assert utils.broadcast_object_list([1, 2], from_process=0) == [1, 2]
    assert utils.pad_across_processes(data) is data
    assert utils.reduce(data)["x"].tolist() == [1.0, 2.0]
    assert utils.reduce(data, "max", scale=2.0)["x"].tolist() == [2.0, 4.0]
    assert utils.send_to_device(data, "meta")["x"].device.type == "meta"
    utils.wait_for_everyone()


def test_kwargs_handlers_to_kwargs_gives_the_fields_that_differ_from_the_defaults() -> None:
    assert utils.GradScalerKwargs(init_scale=1024.0).to_kwargs() == {"init_scale": 1024.0}
    assert utils.AutocastKwargs().to_kwargs() == {}
    timeout = datetime.timedelta(seconds=5)
    handler = utils.InitProcessGroupKwargs(timeout=timeout)
    assert handler.to_kwargs() == {"timeout": timeout}
    assert handler.to_dict()["timeout"] == timeout and handler.to_dict()["backend"] is None
    assert utils.DistributedDataParallelKwargs(find_unused_parameters=True).to_kwargs() == {"find_unused_parameters": True}
    assert isinstance(handler, utils.KwargsHandler)


def test_device_checks_and_torch_version() -> None:
    assert utils.is_cuda_available() == torch.cuda.is_available()
    assert isinstance(utils.is_xpu_available(), bool) and isinstance(utils.is_npu_available(), bool)
    assert isinstance(utils.is_mps_available(), bool)
    assert utils.is_torch_version(">=", "2.4") and not utils.is_torch_version("<", "1.0")
    with pytest.raises(ValueError, match=r"operation='=>'\) is not accepted"):
        utils.is_torch_version("=>", "2.0")


def test_the_top_level_exports() -> None:
    from accel import (  # noqa: F401
        AcceleratorState,
        DataLoaderConfiguration,
        DistributedType,
        GradientAccumulationPlugin,
        PartialState,
        find_executable_batch_size,
        skip_first_batches,
    )

    assert {"PartialState", "AcceleratorState", "DistributedType", "skip_first_batches"} <= set(accel.__all__)


def test_compare_versions_answers_accelerate_with_the_api_version_accel_implements() -> None:
    import accel
    from accel.utils import compare_versions, is_schedulefree_available, str_to_bool
    from accel.utils.versions import compare_versions as at_accelerates_path

    assert accel.__version__ == "1.15.0"
    assert compare_versions("accelerate", ">=", "0.16.0") and at_accelerates_path("accel", "==", "1.15.0")
    assert compare_versions("torch", ">=", "2.0")
    with pytest.raises(ValueError, match=r"compare_versions\(operation='=>'\)"):
        compare_versions("torch", "=>", "2.0")
    assert isinstance(is_schedulefree_available(), bool)
    assert str_to_bool("Yes") == 1 and str_to_bool("off", to_bool=True) is False
