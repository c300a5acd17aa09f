"""Experiment tracking through the Accelerator: log_with, init_trackers, log, get_tracker, end_training.

Uses the real Accelerator, real trackers and the files they write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

TRACKING_TESTS = Path(__file__).parents[1] / "tracking"
sys.path.insert(0, str(TRACKING_TESTS))
sys.path.insert(0, str(Path(__file__).parents[1] / "distributed" / "two_processes"))

from launching import launch  # noqa: E402
from tests_helpers import make_regression  # noqa: E402

from accel.checkpointing import ProjectConfiguration  # noqa: E402
from accel import Accelerator  # noqa: E402
from accel.tracking import GeneralTracker, JSONLinesTracker, LoggerType  # noqa: E402


class Recorder(GeneralTracker):
    """A custom tracker, Accelerate style: records every call."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    @property
    def tracker(self) -> list[tuple[str, Any]]:
        return self.calls

    def start(self) -> None:
        self.calls.append(("start", None))

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.calls.append(("config", values))

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.calls.append(("log", (values, step, kwargs)))

    def finish(self) -> None:
        self.calls.append(("finish", None))


def test_a_tracked_training_loop_writes_jsonl_png_and_a_custom_tracker(tmp_path: Path) -> None:
    recorder = Recorder()
    accelerator = Accelerator(log_with=[LoggerType.JSONL, recorder], project_dir=tmp_path)
    assert accelerator.logging_dir == str(tmp_path) and accelerator.trackers == []
    model, x, y = make_regression()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.init_trackers("proj", config={"lr": 0.1}, init_kwargs={"recorder": {}})
    losses = []
    for step in range(3):
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        accelerator.log({"loss": loss.detach()}, step=step, log_kwargs={"recorder": {"commit": True}})
    assert isinstance(accelerator.get_tracker("jsonl"), JSONLinesTracker)
    assert accelerator.get_tracker("recorder", unwrap=True) is recorder.calls
    accelerator.end_training()

    records = [json.loads(line) for line in (tmp_path / "proj" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["values"]["loss"]) for r in records] == [(i, pytest.approx(v)) for i, v in enumerate(losses)]
    assert json.loads((tmp_path / "proj" / "config.json").read_text()) == {"lr": 0.1}
    if _has("matplotlib"):
        assert (tmp_path / "proj" / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    assert [kind for kind, _ in recorder.calls] == ["start", "config", "log", "log", "log", "finish"]
    assert recorder.calls[2][1][2] == {"commit": True}
    assert accelerator.trackers == []


def test_tensorboard_through_the_accelerator(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason='TensorBoard is an optional extra: pip install "accel[tensorboard]"')
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    accelerator = Accelerator(log_with="tensorboard", project_dir=tmp_path)
    accelerator.init_trackers("proj", init_kwargs={"tensorboard": {"flush_secs": 1}})
    assert isinstance(accelerator.get_tracker("tensorboard", unwrap=True), SummaryWriter)
    accelerator.log({"loss": 2.0}, step=7)
    accelerator.end_training()
    events = EventAccumulator(str(tmp_path / "proj"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(7, 2.0)]


def test_get_tracker_before_init_is_a_blank_tracker_and_an_unknown_name_raises(tmp_path: Path) -> None:
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    blank = accelerator.get_tracker("jsonl")
    assert type(blank) is GeneralTracker and blank.log({"a": 1}) is None
    accelerator.init_trackers("proj", init_kwargs={"jsonl": {"plot": False}})
    with pytest.raises(ValueError, match=r"get_tracker\('wandb'\).*running: \['jsonl'\]"):
        accelerator.get_tracker("wandb")
    with pytest.raises(RuntimeError, match="already called"):
        accelerator.init_trackers("again")
    accelerator.end_training()
    with pytest.raises(RuntimeError, match="init_trackers"):
        accelerator.log({"loss": 1.0})


def test_without_log_with_log_does_nothing(tmp_path: Path) -> None:
    accelerator = Accelerator(project_dir=tmp_path)
    accelerator.init_trackers("proj")
    accelerator.log({"loss": 1.0}, step=0)
    assert accelerator.trackers == [] and list(tmp_path.iterdir()) == []
    accelerator.end_training()


def test_bad_log_with_raises_at_construction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="Did you mean 'jsonl'"):
        Accelerator(log_with="jsnl")
    with pytest.raises(ValueError, match=r"Logging with `jsonl` requires a `logging_dir`.*log_with='jsonl' writes its logs under a folder.*project_dir="):
        Accelerator(log_with="jsonl")
    from accel.tracking import wandb_tracker

    monkeypatch.setattr(wandb_tracker, "installed", lambda module: False)
    hint = r"log_with='wandb'.*pip install \"accel\[wandb\]\" \(or: pip install wandb\)"
    with pytest.raises(ImportError, match=hint):
        Accelerator(log_with=["jsonl", "wandb"], project_dir=tmp_path)


def test_init_kwargs_with_a_misspelt_tracker_raises(tmp_path: Path) -> None:
    accelerator = Accelerator(log_with="jsonl", project_dir=tmp_path)
    with pytest.raises(ValueError, match="init_kwargs key='jsnl'"):
        accelerator.init_trackers("proj", init_kwargs={"jsnl": {"plot": False}})


def test_logging_dir_is_the_configured_one_else_the_project_dir(tmp_path: Path) -> None:
    assert Accelerator(project_dir=tmp_path).logging_dir == str(tmp_path)  # a str, as Accelerate's
    assert Accelerator().logging_dir is None
    config = ProjectConfiguration(project_dir=tmp_path, logging_dir=tmp_path / "logs")
    accelerator = Accelerator(log_with="jsonl", project_config=config)
    assert accelerator.logging_dir == str(tmp_path / "logs")


def test_on_a_process_other_than_the_main_one_nothing_is_created_or_written(tmp_path: Path) -> None:
    recorder = Recorder()
    accelerator = Accelerator(log_with=["jsonl", recorder], project_dir=tmp_path)
    accelerator.__class__ = type("NotMain", (type(accelerator),), {"is_main_process": property(lambda self: False)})
    accelerator.init_trackers("proj")
    accelerator.log({"loss": 1.0})
    assert accelerator.trackers == [] and type(accelerator.get_tracker("jsonl")) is GeneralTracker
    accelerator.end_training()
    assert recorder.calls == [] and not (tmp_path / "proj").exists()


def test_two_processes_only_the_main_one_writes(tmp_path: Path) -> None:
    done = launch(str(TRACKING_TESTS / "tracking_script.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.of("trackers") == [["jsonl", "tensorboard"], []]
    assert done.of("jsonl_tracker") == ["JSONLinesTracker", "GeneralTracker"]
    assert done.of("logging_dir") == [str(tmp_path)] * 2
    records = [json.loads(line) for line in (tmp_path / "proj" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["values"]["rank"]) for r in records] == [(0, 0), (1, 0), (2, 0)]
    assert len(list((tmp_path / "proj").glob("events.out.tfevents.*"))) == (1 if _has("tensorboard") else 0)


def _has(module: str) -> bool:
    from accel.tracking.requirements import installed

    return installed(module)


def test_log_without_a_tracker_warns_once_that_the_values_go_nowhere() -> None:
    import warnings

    accelerator = Accelerator()
    with pytest.warns(UserWarning, match=r"accelerator.log\(\['loss'\]\) logs nowhere: no tracker was asked for"):
        accelerator.log({"loss": 1.0}, step=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accelerator.log({"loss": 0.5}, step=1)  # said once
