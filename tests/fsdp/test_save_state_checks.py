"""save_state / load_state with fsdp_plugin in one process: what is refused, and that reading a
sharded checkpoint never runs code from it (accel.fsdp.safe_reading), even with a forged manifest."""

from __future__ import annotations

import io
import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from fsdp_tiny import batch, loss_of, make_model, optimizer_for

from accel import Accelerator
from accel.checkpointing import CheckpointError
from accel.checkpointing.manifest import describe_file
from accel.fsdp.safe_reading import SafeLoadPlanner, UnsafeCheckpointError, read_metadata
from accel.utils import FullyShardedDataParallelPlugin


def _prepared(fsdp: bool, steps: int = 1) -> tuple[Accelerator, Any, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one process: "nothing to shard"
        plugin = FullyShardedDataParallelPlugin() if fsdp else None
        accelerator = Accelerator(cpu=True, fsdp_plugin=plugin, gradient_accumulation_steps=steps)
        model = make_model()
        model, optimizer = accelerator.prepare(model, optimizer_for(model))
    return accelerator, model, optimizer


def _step(accelerator: Accelerator, model: Any, optimizer: Any) -> None:
    with accelerator.accumulate(model):
        accelerator.backward(loss_of(model, *batch(0)))
        optimizer.step()
        optimizer.zero_grad()


class _Marker:
    """Unpickling it would create a file: the proof that code from a checkpoint ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


def test_saving_inside_an_accumulation_window_is_refused_saying_when_to_save(tmp_path: Path) -> None:
    accelerator, model, optimizer = _prepared(fsdp=True, steps=2)
    _step(accelerator, model, optimizer)
    with pytest.raises(ValueError, match=r"accumulation window \(micro-batch 1 of 2\).*sync_gradients is True"):
        accelerator.save_state(tmp_path / "mid")
    assert not (tmp_path / "mid").exists()


def test_a_checkpoint_with_a_window_s_gradients_is_refused_by_a_sharded_run(tmp_path: Path) -> None:
    plain, model, optimizer = _prepared(fsdp=False, steps=2)
    _step(plain, model, optimizer)
    plain.save_state(tmp_path / "mid")  # holds the gradients accumulated so far
    sharded, _, _ = _prepared(fsdp=True, steps=2)
    with pytest.raises(CheckpointError, match="inside a gradient accumulation window.*resume it without fsdp_plugin"):
        sharded.load_state(tmp_path / "mid")


def test_a_forged_shard_index_is_refused_and_nothing_in_it_runs(tmp_path: Path) -> None:
    accelerator, model, optimizer = _prepared(fsdp=True)
    _step(accelerator, model, optimizer)
    folder = accelerator.save_state(tmp_path / "checkpoint")
    marker = tmp_path / "ran"
    (folder / "shards" / ".metadata").write_bytes(pickle.dumps(_Marker(marker)))
    manifest = json.loads((folder / "manifest.json").read_text())  # forged to match, as an attacker would
    manifest["files"]["shards/.metadata"] = vars(describe_file(folder / "shards" / ".metadata"))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"shards/\.metadata cannot be read safely.*refused unrun"):
        accelerator.load_state(folder)
    with pytest.raises(UnsafeCheckpointError, match="posix.mkdir|os.mkdir"):
        read_metadata(folder / "shards")
    assert not marker.exists()


def test_non_tensor_values_are_read_weights_only(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = io.BytesIO()
    torch.save({"lr": _Marker(marker)}, evil)
    evil.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        SafeLoadPlanner().load_bytes(None, evil)
    assert not marker.exists()


def test_a_manifest_naming_a_file_outside_the_checkpoint_is_refused(tmp_path: Path) -> None:
    accelerator, model, optimizer = _prepared(fsdp=True)
    _step(accelerator, model, optimizer)
    folder = accelerator.save_state(tmp_path / "checkpoint")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["shards/../../elsewhere"] = {"size": 1, "sha256": "0"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="bad file entry 'shards/../../elsewhere'"):
        accelerator.load_state(folder)


@pytest.mark.parametrize("kind", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_a_checkpoint_saved_before_the_first_step_resumes_exactly(tmp_path: Path, kind: str) -> None:
    """torch lays out an empty optimizer state by stepping it; neither the run that saves nor the
    one that resumes may keep that step (AdamW would count one step more)."""

    def run(load: Path | None = None, save: Path | None = None) -> list[torch.Tensor]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # one process: "nothing to shard"
            accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(state_dict_type=kind))
            model = make_model()
            model, optimizer = accelerator.prepare(model, optimizer_for(model))
        if save is not None:
            accelerator.save_state(save)
            assert not optimizer.state  # no side effect on the run that saved
        if load is not None:
            accelerator.load_state(load)
            assert not optimizer.state
        for step in range(3):
            _step(accelerator, model, optimizer)
        return [p.detach().clone() for p in model.parameters()]

    straight = run(save=tmp_path / "start")
    resumed = run(load=tmp_path / "start")
    assert all(torch.equal(a, b) for a, b in zip(straight, resumed))


def test_a_folder_holding_other_files_is_not_written_into(tmp_path: Path) -> None:
    accelerator, model, optimizer = _prepared(fsdp=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="not an accel checkpoint.*notes.txt"):
        accelerator.save_state(tmp_path / "mine")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no hidden work folder left either


def test_several_models_and_optimizers_resume_exactly(tmp_path: Path) -> None:
    """Each model and optimizer under its own key of the one sharded checkpoint (model, model_1, ...)."""

    def run(load: bool) -> list[torch.Tensor]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # one process: "nothing to shard"
            accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
            first, second = make_model(seed=0), make_model(seed=1)
            parts = accelerator.prepare(first, optimizer_for(first), second, optimizer_for(second))
        pairs = [(parts[0], parts[1]), (parts[2], parts[3])]
        for step in range(4):
            if step == 2 and not load:
                accelerator.save_state(tmp_path / "two_models")
            if step == 2 and load:
                accelerator.load_state(tmp_path / "two_models")
            for model, optimizer in pairs:
                _step(accelerator, model, optimizer)
            if step == 1 and load:  # what the checkpoint replaces: different training
                for model, optimizer in pairs:
                    _step(accelerator, model, optimizer)
        return [p.detach().clone() for model, _ in pairs for p in model.parameters()]

    straight, resumed = run(load=False), run(load=True)
    assert all(torch.equal(a, b) for a, b in zip(straight, resumed))


def test_a_checkpoint_published_without_a_process_s_shards_is_refused_before_loading(tmp_path: Path) -> None:
    """As an accel that did not confirm the shards published on machines with their own disks:
    the manifest lacks the shards the main process could not see."""
    accelerator, model, optimizer = _prepared(fsdp=True)
    _step(accelerator, model, optimizer)
    folder = accelerator.save_state(tmp_path / "checkpoint")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]["shards/__0_0.distcp"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "shards" / "__0_0.distcp").unlink()
    before = [p.detach().clone() for p in model.parameters()]
    _step(accelerator, model, optimizer)
    changed = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError, match=r"is incomplete: its shard index refers to shards/__0_0\.distcp"):
        accelerator.load_state(folder)
    assert all(torch.equal(a, b) for a, b in zip(changed, (p.detach() for p in model.parameters())))
    assert not all(torch.equal(a, b) for a, b in zip(before, changed))
