"""The smaller names scripts import from accelerate.utils / accelerate: each does what its name says."""

from __future__ import annotations

import importlib.util

import dataclasses
import os
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from accel import Accelerator, debug_launcher, init_empty_weights, notebook_launcher
from accel.utils import (
    KwargsHandler,
    ProfileKwargs,
    TorchDynamoPlugin,
    clear_environment,
    extract_model_from_parallel,
    is_bf16_available,
    is_deepspeed_available,
    is_tensorboard_available,
    is_torch_xla_available,
    patch_environment,
    save,
    synchronize_rng_states,
    tqdm,
    write_basic_config,
)


def test_availability_reflects_what_is_installed() -> None:
    assert is_tensorboard_available() is True  # in the test extra
    assert is_deepspeed_available() is (importlib.util.find_spec("deepspeed") is not None)  # the test extra has it
    assert is_bf16_available() is True


def test_is_torch_xla_available_takes_accelerates_arguments() -> None:
    # Accelerate's test helpers call it with check_is_tpu=True; torch_xla is not installed here.
    assert is_torch_xla_available() is False
    assert is_torch_xla_available(check_is_tpu=True) is False and is_torch_xla_available(check_is_gpu=True) is False
    with pytest.raises(ValueError, match="check_is_tpu and check_is_gpu cannot both be True"):
        is_torch_xla_available(check_is_tpu=True, check_is_gpu=True)


def test_patch_environment_sets_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEP_ME", "old")
    monkeypatch.delenv("NEW_ONE", raising=False)
    with patch_environment(keep_me=1, new_one="x"):
        assert os.environ["KEEP_ME"] == "1" and os.environ["NEW_ONE"] == "x"
    assert os.environ["KEEP_ME"] == "old" and "NEW_ONE" not in os.environ
    with clear_environment():
        assert "KEEP_ME" not in os.environ
    assert os.environ["KEEP_ME"] == "old"


def test_write_basic_config_writes_a_config_accel_launch_reads(tmp_path: Path) -> None:
    path = write_basic_config(mixed_precision="bf16", save_location=tmp_path / "config.yaml")
    assert path == tmp_path / "config.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["mixed_precision"] == "bf16" and data["num_processes"] == 1
    assert write_basic_config(save_location=path) is False


def test_extract_model_and_save(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    assert extract_model_from_parallel(nn.DataParallel(model)) is model
    save({"w": torch.ones(2)}, tmp_path / "a.pt")
    assert torch.equal(torch.load(tmp_path / "a.pt", weights_only=True)["w"], torch.ones(2))
    save({"w": torch.ones(2)}, tmp_path / "a.safetensors", safe_serialization=True)
    assert (tmp_path / "a.safetensors").stat().st_size > 0


def test_tqdm_is_shown_on_the_main_process_and_hidden_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tqdm(range(3)).disable is False

    class SecondProcess:
        is_local_main_process = False

    monkeypatch.setattr("accel.utils.other.PartialState", SecondProcess)
    assert tqdm(range(3)).disable is True
    assert tqdm(range(3), main_process_only=False).disable is False


def test_synchronize_rng_states_in_one_process_keeps_the_state() -> None:
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    generator = torch.Generator().manual_seed(1)
    synchronize_rng_states(["torch", "cuda", "generator"], generator)
    assert torch.equal(torch.rand(2), expected)
    with pytest.raises(ValueError, match="unknown rng type 'xla'"):
        synchronize_rng_states(["xla"])


def test_init_empty_weights_allocates_no_parameters_but_keeps_buffers() -> None:
    with init_empty_weights():
        model = nn.Sequential(nn.Linear(4096, 4096), nn.BatchNorm1d(8))
    assert model[0].weight.is_meta and isinstance(model[0].weight, nn.Parameter)
    assert model[1].running_mean.device.type == "cpu"
    model.to_empty(device="cpu")
    assert model[0].weight.shape == (4096, 4096)
    with init_empty_weights(include_buffers=True):
        assert nn.BatchNorm1d(8).running_mean.is_meta


def _gather_ranks(folder: str) -> None:
    accelerator = Accelerator()
    ranks = accelerator.gather(torch.tensor([accelerator.process_index]))
    Path(folder, f"rank{accelerator.process_index}").write_text(str(ranks.tolist()))
    accelerator.end_training()


def test_debug_launcher_runs_the_function_in_real_processes(tmp_path: Path) -> None:
    debug_launcher(_gather_ranks, args=(str(tmp_path),), num_processes=2)
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["[0, 1]", "[0, 1]"]


def test_notebook_launcher_with_one_process_runs_here_with_the_precision(tmp_path: Path) -> None:
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bf16 is slow on some CPUs, which warns
        notebook_launcher(lambda: seen.append(Accelerator().mixed_precision), mixed_precision="bf16")
    assert seen == ["bf16"]
    with pytest.raises(ValueError, match="num_nodes=2"):
        notebook_launcher(lambda: None, num_nodes=2)


def test_profile_records_operators_and_writes_a_trace(tmp_path: Path) -> None:
    accelerator = Accelerator(kwarg_handlers=[ProfileKwargs(record_shapes=True, output_trace_dir=str(tmp_path))])
    with accelerator.profile() as profiler:
        torch.randn(32, 32) @ torch.randn(32, 32)
    assert "aten::mm" in {event.key for event in profiler.key_averages()}
    assert (tmp_path / "profile_0.json").stat().st_size > 0  # Accelerate's file name
    with pytest.raises(ValueError, match="activities='tpu' is not accepted"):
        ProfileKwargs(activities=("tpu",))


def test_dynamo_plugin_takes_accelerates_backend_names_and_refuses_unknown_ones() -> None:
    assert Accelerator(dynamo_plugin=TorchDynamoPlugin()).dynamo_plugin.backend == "no"
    assert TorchDynamoPlugin(backend="INDUCTOR").backend == "inductor"
    with pytest.raises(ValueError, match="TorchDynamoPlugin.backend='inductr' is not accepted.*Did you mean 'inductor'"):
        TorchDynamoPlugin(backend="inductr")


def test_a_scripts_own_handler_may_be_a_plain_dataclass() -> None:
    @dataclasses.dataclass
    class MyHandler(KwargsHandler):
        a: int = 0
        b: str = "x"

    assert MyHandler(a=2).to_kwargs() == {"a": 2}
    assert MyHandler().to_dict() == {"a": 0, "b": "x"}
