"""Resuming under accel a checkpoint that Hugging Face Accelerate's save_state wrote: the continued
run equals Accelerate's own continued run, bit for bit; pickles that would run code are refused
unrun; automatic numbering continues.

The checkpoints come from real Accelerate runs of accelerate_run.py (only its import differs
between the two libraries), in fresh processes."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accel.checkpointing import CheckpointError

pytest.importorskip("accelerate")

HERE = Path(__file__).parent
SCRIPT = str(HERE / "accelerate_run.py")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _reports(command: list[str], env: dict[str, str] | None = None) -> dict[int, dict[str, Any]]:
    done = subprocess.run(command, env=env or _env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line["rank"]: line for line in lines}


def run(library: str, *args: str) -> dict[str, Any]:
    """accelerate_run.py in one fresh process; its report."""
    return _reports([sys.executable, SCRIPT, library, *args])[0]


def run_two(library: str, *args: str) -> dict[int, dict[str, Any]]:
    """accelerate_run.py in two processes (torchrun for Accelerate, accel launch for accel); each rank's report."""
    if library == "accelerate":
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        return _reports([*command, SCRIPT, library, *args], _env(ACCELERATE_USE_CPU="true"))
    command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", "2"]
    return _reports([*command, SCRIPT, library, *args])


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, dict[str, Any]]:
    """(Accelerate's uninterrupted run, its checkpoint_3 folder, Accelerate's run resumed from it)."""
    project = tmp_path_factory.mktemp("accelerate")
    full = run("accelerate", "save", str(project))
    folder = project / "checkpoints" / "checkpoint_3"
    assert Path(full["saved"]) == folder
    resumed = run("accelerate", "resume", str(tmp_path_factory.mktemp("accelerate_resumed")), str(folder))
    return full, folder, resumed


def _same_run(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours["draws"] == theirs["draws"]  # python, numpy and torch RNG right after loading
    assert ours["steps"] == theirs["steps"]  # every loss and learning rate of the continued epoch, exactly
    assert ours["weights"] == theirs["weights"]


def test_the_folder_is_accelerates(saved: tuple[dict[str, Any], Path, dict[str, Any]]) -> None:
    _, folder, _ = saved
    assert sorted(p.name for p in folder.iterdir()) == [
        "custom_checkpoint_0.pkl", "model.safetensors", "optimizer.bin", "random_states_0.pkl", "scheduler.bin"]


def test_accel_continues_exactly_as_accelerate(saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path) -> None:
    full, folder, theirs = saved
    ours = run("accel", "resume", str(tmp_path), str(folder))
    _same_run(ours, theirs)
    assert ours["progress"] == 1  # the registered object
    _same_run(ours, full)  # in one process Accelerate's resumed run is its uninterrupted run
    assert len({loss for loss, _ in ours["steps"]}) > 1 and len({lr for _, lr in ours["steps"]}) > 1


def test_the_automatic_numbering_continues(saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path) -> None:
    _, folder, _ = saved
    project = tmp_path / "project"
    shutil.copytree(folder, project / "checkpoints" / "checkpoint_3")
    ours = run("accel", "resume", str(project), str(project / "checkpoints" / "checkpoint_3"))
    assert Path(ours["saved"]) == project / "checkpoints" / "checkpoint_4"
    assert (project / "checkpoints" / "checkpoint_4" / "manifest.json").is_file()  # written in accel's format


def test_load_state_without_a_folder_finds_the_accelerate_checkpoint(
    saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path
) -> None:
    from accelerate_run import build

    _, folder, _ = saved
    shutil.copytree(folder, tmp_path / "checkpoints" / "checkpoint_3")
    accelerator, progress, *_ = build(str(tmp_path))
    assert accelerator.load_state() == tmp_path / "checkpoints" / "checkpoint_3"
    assert progress.epoch == 1 and accelerator.save_iteration == 4


def test_pickled_weights_safe_serialization_false(
    saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, _, theirs = saved
    project = tmp_path_factory.mktemp("bin")
    run("accelerate", "save", str(project), "--bin")
    folder = project / "checkpoints" / "checkpoint_3"
    assert (folder / "pytorch_model.bin").is_file() and not (folder / "model.safetensors").exists()
    _same_run(run("accel", "resume", str(tmp_path_factory.mktemp("bin_resumed")), str(folder)), theirs)


def test_two_processes_restore_each_process_rng(tmp_path_factory: pytest.TempPathFactory) -> None:
    project = tmp_path_factory.mktemp("two")
    full = run_two("accelerate", "save", str(project))
    folder = project / "checkpoint_3"
    assert {"random_states_0.pkl", "random_states_1.pkl"} <= {p.name for p in folder.iterdir()}
    theirs = run_two("accelerate", "resume", str(tmp_path_factory.mktemp("two_a")), str(folder))
    ours = run_two("accel", "resume", str(tmp_path_factory.mktemp("two_b")), str(folder))
    for rank in (0, 1):
        _same_run(ours[rank], theirs[rank])
        assert ours[rank]["steps"] == full[rank]["steps"]


def test_the_fp16_loss_scaler_is_restored(saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path) -> None:
    """scaler.pt as Accelerate writes it (torch.save of its GradScaler's state_dict; Accelerate has one on a GPU only)."""
    from accelerate_run import build

    _, folder, _ = saved
    shutil.copytree(folder, tmp_path / "ckpt")
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=7)
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
    scaler.update(new_scale=torch.tensor(512.0))
    state = scaler.state_dict()
    torch.save(state, tmp_path / "ckpt" / "scaler.pt")
    accelerator, *_ = build(str(tmp_path / "project"), mixed_precision="fp16")
    accelerator.load_state(tmp_path / "ckpt")
    assert accelerator.scaler.state_dict() == state
    assert accelerator.scaler.get_scale() == 512.0


class _Marker:
    """Unpickling this would create a file: what a malicious checkpoint does."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


@pytest.mark.parametrize("name", ["random_states_0.pkl", "optimizer.bin", "custom_checkpoint_0.pkl", "pytorch_model.bin"])
def test_a_pickle_that_would_run_code_is_refused_unrun(
    saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path, name: str
) -> None:
    from accelerate_run import build

    _, folder, _ = saved
    copy = tmp_path / "ckpt"
    shutil.copytree(folder, copy)
    if name == "pytorch_model.bin":
        (copy / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    with open(copy / name, "wb") as file:
        torch.save({"state": _Marker(marker)}, file, pickle_protocol=pickle.DEFAULT_PROTOCOL)
    accelerator, progress, model, *_ = build(str(tmp_path / "project"))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError, match=rf"{name} holds objects that only running code could rebuild.*nothing in it ran"):
        accelerator.load_state(copy)
    assert not marker.exists()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing restored
    assert progress.epoch == 0


def test_a_damaged_file_is_named(saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path) -> None:
    from accelerate_run import build

    _, folder, _ = saved
    shutil.copytree(folder, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"x")
    accelerator, *_ = build(str(tmp_path / "project"))
    with pytest.raises(CheckpointError, match="model.safetensors cannot be read"):
        accelerator.load_state(tmp_path / "ckpt")


def test_a_different_number_of_registered_objects_is_refused(
    saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path
) -> None:
    from accelerate_run import Progress, build

    _, folder, _ = saved
    accelerator, *_ = build(str(tmp_path))
    accelerator.register_for_checkpointing(Progress())
    with pytest.raises(CheckpointError, match=r"holds 1 custom_checkpoint_<i>\.pkl file\(s\).* has 2 object"):
        accelerator.load_state(folder)


def test_a_pickled_sampler_is_refused(saved: tuple[dict[str, Any], Path, dict[str, Any]], tmp_path: Path) -> None:
    from accelerate_run import build

    _, folder, _ = saved
    shutil.copytree(folder, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "sampler.bin").write_bytes(b"x")
    accelerator, *_ = build(str(tmp_path / "project"))
    with pytest.raises(CheckpointError, match="sampler.bin is a pickled sampler object.*Delete sampler.bin"):
        accelerator.load_state(tmp_path / "ckpt")
