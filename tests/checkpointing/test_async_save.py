"""save_state(async_save=True) in one process, with real files: the checkpoint holds the state at
the call even though training changes it while the write runs, resumes exactly, a failed write
is raised at the next call, and a run killed (kill -9) during the write, or ending without
end_training, never leaves a half-published checkpoint."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import accel.checkpointing.save as save_module
import accel.checkpointing.serialization as serialization
from accel import Accelerator, ProjectConfiguration
from accel.checkpointing import CheckpointWriteError, background, open_checkpoint
from accel.checkpointing.naming import numbered_checkpoints

HERE = Path(__file__).parent


def _build(project: Path | None = None, **config: Any) -> tuple[Accelerator, Any, Any, Any]:
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=project, **config))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return accelerator, *accelerator.prepare(model, optimizer, scheduler)


def _train(parts: tuple[Accelerator, Any, Any, Any], steps: int, start: int) -> None:
    accelerator, model, optimizer, scheduler = parts
    for step in range(start, start + steps):
        generator = torch.Generator().manual_seed(step)
        inputs = torch.randn(8, 16, generator=generator)
        accelerator.backward(model(inputs).square().mean())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _state(parts: tuple[Accelerator, Any, Any, Any]) -> dict[str, torch.Tensor]:
    _, model, optimizer, _ = parts
    state = {f"w.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    for index, entry in optimizer.state_dict()["state"].items():
        state.update({f"o.{index}.{k}": torch.as_tensor(v).clone() for k, v in entry.items()})
    return state


@pytest.fixture(autouse=True)
def _nothing_left_pending() -> Any:
    yield
    background.finish_pending("the test's end")  # a test that failed midway must not leak its write


class _Gate:
    """Holds the background write at its first weights file until `open()`: the test acts meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached, self.release = threading.Event(), threading.Event()
        original = save_module.save_tensors

        def held(tensors: dict[str, torch.Tensor], path: Path) -> None:
            self.reached.set()
            assert self.release.wait(30), "the test never released the write"
            original(tensors, path)

        monkeypatch.setattr(save_module, "save_tensors", held)

    def open(self) -> None:
        assert self.reached.wait(30), "the background write never started"
        self.release.set()


def test_training_changes_the_weights_while_the_write_runs_and_the_checkpoint_holds_the_saved_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = _build(tmp_path / "project")
    _train(parts, 3, 0)
    saved = _state(parts)
    gate = _Gate(monkeypatch)
    folder = parts[0].save_state(async_save=True)
    assert not folder.exists()  # still being written: not published under its name yet
    _train(parts, 2, 3)  # AdamW changes the weights and its moments in place
    with torch.no_grad():
        parts[1][0].weight.add_(100.0)
    gate.open()
    parts[0].end_training()
    open_checkpoint(folder, "checkpoint")  # complete: every file matches the manifest
    weights = load_file(folder / "model.safetensors")
    torch.testing.assert_close(weights["0.weight"], saved["w.0.weight"], rtol=0, atol=0)
    moments = torch.load(folder / "optimizer.pt", weights_only=True)["state"][0]["exp_avg"]
    torch.testing.assert_close(moments, saved["o.0.exp_avg"], rtol=0, atol=0)


def test_an_asynchronous_checkpoint_resumes_exactly_as_a_blocking_one(tmp_path: Path) -> None:
    blocking, background_run = _build(tmp_path / "sync"), _build(tmp_path / "async", async_save=True, total_limit=2)
    for parts in (blocking, background_run):
        for start in range(0, 12, 3):
            _train(parts, 3, start)
            parts[0].save_state()  # the second run: asynchronous by its ProjectConfiguration
        _train(parts, 3, 12)
    background_run[0].end_training()  # waits for checkpoint_3
    assert sorted(p.name for p in (tmp_path / "async" / "checkpoints").iterdir()) == ["checkpoint_2", "checkpoint_3"]
    finals = []
    for name in ("sync", "async"):
        parts = _build(tmp_path / name)
        parts[0].load_state()  # the newest: checkpoint_3
        _train(parts, 3, 12)
        finals.append(_state(parts))
    assert finals[0].keys() == finals[1].keys()
    for key, value in finals[0].items():
        torch.testing.assert_close(finals[1][key], value, rtol=0, atol=0, msg=key)
    for key, value in _state(background_run).items():
        torch.testing.assert_close(finals[1][key], value, rtol=0, atol=0, msg=key)


def test_load_state_right_after_an_asynchronous_save_waits_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = _build(tmp_path / "project")
    _train(parts, 2, 0)
    saved = _state(parts)
    gate = _Gate(monkeypatch)
    parts[0].save_state(async_save=True)
    _train(parts, 2, 2)
    threading.Timer(0.3, gate.open).start()
    assert parts[0].load_state().name == "checkpoint_0"
    for key, value in saved.items():
        torch.testing.assert_close(_state(parts)[key], value, rtol=0, atol=0, msg=key)


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(serialization, "save_file", no_space)


@pytest.mark.parametrize("next_call", ["save_state", "end_training", "load_state"])
def test_a_failed_background_write_is_raised_at_the_next_call_and_nothing_is_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, next_call: str
) -> None:
    project = tmp_path / "project"
    parts = _build(project, async_save=True)
    parts[0].save_state()
    parts[0].load_state()  # checkpoint_0 is complete
    _full_disk(monkeypatch)
    failed = parts[0].save_state()  # returns: the write fails in the background
    assert failed.name == "checkpoint_1"
    monkeypatch.undo()
    with pytest.raises(CheckpointWriteError, match=rf"{next_call}: the previous save_state\(async_save=True\) of "
                       r"'.*checkpoint_1' failed .* No space left on device"):
        getattr(parts[0], next_call)()
    assert [p.name for p in (project / "checkpoints").iterdir()] == ["checkpoint_0"]  # no half checkpoint, no work folder
    background.finish_pending("check")  # reported once: nothing is pending any more
    assert parts[0].save_state().name == "checkpoint_2"  # the next save works again
    parts[0].end_training()
    open_checkpoint(project / "checkpoints" / "checkpoint_2", "checkpoint_2")


def test_async_save_comes_from_the_project_setting_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_ASYNC_SAVE", "true")
    assert ProjectConfiguration().async_save is True
    parts = _build(tmp_path)
    gate = _Gate(monkeypatch)
    folder = parts[0].save_state(tmp_path / "ckpt")
    assert not folder.exists()  # written in the background
    gate.open()
    monkeypatch.setenv("ACCEL_ASYNC_SAVE", "maybe")
    with pytest.raises(ValueError, match="ACCEL_ASYNC_SAVE"):
        ProjectConfiguration()
    with pytest.raises(TypeError, match="async_save"):
        parts[0].save_state(tmp_path / "other", async_save="yes")  # type: ignore[arg-type]
    parts[0].end_training()
    assert folder.is_dir() and not (tmp_path / "other").exists()


def _child(mode: str, project: Path, **options: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ACCEL_ASYNC_SAVE", None)
    return subprocess.Popen(
        [sys.executable, str(HERE / "async_child.py"), mode, str(project)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options,
    )


def test_kill_9_during_the_background_write_leaves_no_checkpoint_and_load_state_takes_the_previous(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    child = _child("kill", project)
    assert child.stdout is not None
    line = child.stdout.readline()  # blocks until the write of checkpoint_1 is under way
    assert line.strip() == "writing", child.communicate(timeout=60)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    checkpoints = project / "checkpoints"
    assert [path.name for _, path in numbered_checkpoints(checkpoints)] == ["checkpoint_0"]
    assert any(p.name.startswith(".checkpoint_1.tmp-") for p in checkpoints.iterdir())  # killed mid-write indeed
    accelerator = Accelerator(cpu=True, project_dir=project)
    model = accelerator.prepare(torch.nn.Linear(64, 64))
    assert accelerator.load_state().name == "checkpoint_0"
    torch.testing.assert_close(model.weight.detach(), torch.load(project / "expected_0.pt"), rtol=0, atol=0)
    accelerator.save_state()  # the next save clears what the killed one left
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_0", "checkpoint_1"]


def test_a_script_ending_without_end_training_still_publishes_its_last_asynchronous_checkpoint(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    child = _child("exit", project)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-3000:]
    folder = project / "checkpoints" / "checkpoint_1"
    open_checkpoint(folder, "checkpoint_1")
    weights = load_file(folder / "model.safetensors")["weight"]
    torch.testing.assert_close(weights, torch.load(project / "expected_1.pt"), rtol=0, atol=0)


def test_save_hooks_run_before_save_state_returns_and_their_files_are_published_with_the_checkpoint(
    tmp_path: Path,
) -> None:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    first, second = accelerator.prepare(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    called: list[bool] = []

    def save_second_myself(models: list[Any], weights: list[dict[str, torch.Tensor]], output_dir: str) -> None:
        torch.save(models[1].weight.detach().clone(), Path(output_dir) / "mine.pt")
        weights.pop()
        called.append(True)

    accelerator.register_save_state_pre_hook(save_second_myself)
    folder = accelerator.save_state(tmp_path / "ckpt", async_save=True)
    assert called == [True]  # on the main thread, with the state of the call
    saved = second.weight.detach().clone()
    with torch.no_grad():
        second.weight.add_(1.0)
    accelerator.end_training()
    names = {p.name for p in folder.iterdir()}
    assert {"mine.pt", "model.safetensors"} <= names and "model_1.safetensors" not in names
    torch.testing.assert_close(torch.load(folder / "mine.pt"), saved, rtol=0, atol=0)
