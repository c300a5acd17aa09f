"""What a checkpoint folder holds: the manifest, safetensors weights, and files that
torch.load(weights_only=True) reads; and that loading restores each part."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import accel
from accel import Accelerator
from accel.checkpointing import FORMAT_VERSION
from accel.checkpointing.manifest import describe_file
from checkpoint_scenario import ACCUMULATION, Job, Setup, build


def _trained(tmp_path: Path, micro_batches: int, precision: str = "no") -> tuple[Setup, object]:
    """A setup trained `micro_batches` into its first epoch, with the loader's iterator kept alive."""
    setup = build(Job(precision=precision, project_dir=str(tmp_path / "project")))
    batches = iter(setup.loader)
    for _ in range(micro_batches):
        setup.micro_batch(*next(batches))
    return setup, batches


def test_the_manifest_describes_the_checkpoint(tmp_path: Path) -> None:
    setup, _ = _trained(tmp_path, 2, precision="fp16")
    folder = setup.accelerator.save_state(tmp_path / "ckpt")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "accel-checkpoint"
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["accel_version"] == accel.__version__
    assert (manifest["iteration"], manifest["precision"], manifest["fp8"]) == (0, "fp16", None)
    assert manifest["num_processes"] == 1
    assert manifest["gradient_accumulation"] == {"steps": ACCUMULATION, "micro_batch": 2, "sync_gradients": False}
    assert manifest["contents"] == dict(models=1, optimizers=1, schedulers=1, dataloaders=1, custom_objects=1)
    assert manifest["dataloaders"] == [{"epoch": 0, "batch": 2}]
    on_disk = {path.name for path in folder.iterdir()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for name, entry in manifest["files"].items():
        assert entry == {"size": (folder / name).stat().st_size, "sha256": describe_file(folder / name).sha256}


def test_files_are_safetensors_or_load_with_weights_only(tmp_path: Path) -> None:
    setup, _ = _trained(tmp_path, 2)
    folder = setup.accelerator.save_state(tmp_path / "ckpt")
    names = {path.name for path in folder.iterdir()}
    assert names == {
        "manifest.json", "model.safetensors", "gradients.safetensors", "optimizer.pt", "scheduler.pt",
        "precision.pt", "custom_checkpoint_0.pt", "random_states_0.pt", "dataloaders_0.pt",
    }
    for path in folder.glob("*.pt"):
        torch.load(path, weights_only=True)
    weights = load_file(folder / "model.safetensors")
    assert set(weights) == {name for name, _ in setup.model.named_parameters()}


def test_gradients_are_saved_only_inside_an_accumulation_window(tmp_path: Path) -> None:
    setup, _ = _trained(tmp_path, ACCUMULATION)
    assert not (setup.accelerator.save_state(tmp_path / "boundary") / "gradients.safetensors").exists()


def test_tied_weights_are_written_once_and_restored_tied(tmp_path: Path) -> None:
    def tied() -> nn.Module:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
        model[1].weight = model[0].weight
        return model

    accelerator = Accelerator()
    accelerator.prepare(tied())
    folder = accelerator.save_state(tmp_path / "ckpt")
    assert set(load_file(folder / "model.safetensors")) == {"0.weight"}
    other = Accelerator()
    model = other.prepare(tied())
    with torch.no_grad():
        model[0].weight.zero_()
    other.load_state(folder)
    assert model[1].weight is model[0].weight
    assert torch.equal(model[0].weight, tied()[0].weight)


def test_precision_state_is_always_saved_and_holds_the_loss_scaler_for_fp16(tmp_path: Path) -> None:
    for precision in ("no", "fp16"):
        setup, _ = _trained(tmp_path / precision, 1, precision=precision)
        folder = setup.accelerator.save_state(tmp_path / precision / "ckpt")
        state = torch.load(folder / "precision.pt", weights_only=True)
        assert state == setup.accelerator.precision.state_dict()
    assert state["scaler"]["scale"] == 1024.0


def test_load_restores_every_part(tmp_path: Path) -> None:
    setup, _ = _trained(tmp_path, 5, precision="fp16")
    folder = setup.accelerator.save_state(tmp_path / "ckpt")
    draws = (random.random(), float(np.random.rand()), torch.rand(1).item())
    other = build(Job(precision="fp16", project_dir=str(tmp_path / "other")))
    assert other.accelerator.load_state(folder) == folder
    assert (random.random(), float(np.random.rand()), torch.rand(1).item()) == draws
    assert other.progress.micro_batches == 5
    assert other.accelerator.gradient_state.step == setup.accelerator.gradient_state.step == 2
    assert other.scheduler.state_dict() == setup.scheduler.state_dict()
    assert other.accelerator.precision.state_dict() == setup.accelerator.precision.state_dict()
    assert other.loader.state_dict()["batch"] == 5
    for (name, mine), theirs in zip(setup.model.named_parameters(), other.model.parameters()):
        assert torch.equal(mine, theirs), name
        assert torch.equal(mine.grad, theirs.grad), name
    saved, loaded = setup.optimizer.state_dict(), other.optimizer.state_dict()
    assert saved["param_groups"] == loaded["param_groups"]
    for index, state in saved["state"].items():
        for key, value in state.items():
            assert torch.equal(value, loaded["state"][index][key]), (index, key)


def test_save_and_load_return_the_folder_as_a_path(tmp_path: Path) -> None:
    accelerator = Accelerator()
    accelerator.prepare(nn.Linear(2, 2))
    folder = accelerator.save_state(str(tmp_path / "ckpt"))
    assert folder == tmp_path / "ckpt"
    assert accelerator.load_state(str(folder)) == folder


@pytest.mark.parametrize("precision", ["bf16", "16-true", "bf16-true", "64-true"])
def test_weights_round_trip_in_other_precisions(tmp_path: Path, precision: str) -> None:
    setup, _ = _trained(tmp_path, 3, precision=precision)
    folder = setup.accelerator.save_state(tmp_path / "ckpt")
    other = build(Job(precision=precision, project_dir=str(tmp_path / "other")))
    other.accelerator.load_state(folder)
    for mine, theirs in zip(setup.model.parameters(), other.model.parameters()):
        assert torch.equal(mine, theirs)
