"""`log_with=`: what it accepts, and the errors it raises at construction for what cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accel.tracking import LOGGER_TYPE_TO_CLASS, GeneralTracker, LoggerType, filter_trackers, register_tracker_class
from accel.tracking import tensorboard_tracker
from accel.tracking.registry import get_available_trackers, missing_install
from accel.tracking.selection import check_tracker_kwargs, create_trackers


class Recorder(GeneralTracker):
    name = "recorder"
    requires_logging_directory = False

    def __init__(self, run_name: str = "x", **options: Any) -> None:
        super().__init__()
        self.run_name, self.options = run_name, options

    @property
    def tracker(self) -> str:
        return "inner"


def test_one_name_a_list_an_enum_and_an_instance(tmp_path: Path) -> None:
    mine = Recorder()
    assert filter_trackers("jsonl", tmp_path) == ["jsonl"]
    assert filter_trackers(LoggerType.JSONL, tmp_path) == ["jsonl"]
    assert filter_trackers(["JSONL", mine, "jsonl", mine], tmp_path) == ["jsonl", mine]
    assert filter_trackers(mine) == [mine]
    assert filter_trackers(None) == [] and filter_trackers([]) == []


def test_all_is_every_installed_tracker_plus_the_given_instances(tmp_path: Path) -> None:
    mine = Recorder()
    available = [str(t) for t in get_available_trackers()]
    assert "jsonl" in available
    assert filter_trackers("all", tmp_path) == available
    assert filter_trackers([LoggerType.ALL, mine], tmp_path) == [*available, mine]


def test_all_leaves_out_a_library_that_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensorboard_tracker, "installed", lambda module: False)
    assert "tensorboard" not in filter_trackers("all", tmp_path)


def test_an_unknown_name_raises_with_the_closest_match_and_the_accepted_names() -> None:
    with pytest.raises(ValueError, match=r"log_with='tensorbord'.*'jsonl'.*Did you mean 'tensorboard'\?"):
        filter_trackers("tensorbord")


def test_an_accelerate_tracker_accel_does_not_ship_says_how_to_plug_it_in() -> None:
    with pytest.raises(ValueError, match="does not ship a comet_ml tracker.*GeneralTracker"):
        filter_trackers(LoggerType.COMETML)


def test_a_missing_library_raises_naming_the_pip_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensorboard_tracker, "installed", lambda module: False)
    with pytest.raises(ImportError, match=r'pip install "accel\[tensorboard\]" \(or: pip install tensorboard\)'):
        filter_trackers(["jsonl", "tensorboard"], tmp_path)


@pytest.mark.parametrize("name", ["jsonl", "tensorboard", "aim"])
def test_a_tracker_needing_a_folder_without_one_raises_saying_what_to_pass(name: str) -> None:
    assert missing_install(LOGGER_TYPE_TO_CLASS[name]) is None, f"{name} is in the test extra"
    with pytest.raises(ValueError, match=rf"log_with='{name}'.*project_dir="):
        filter_trackers(name, None)


def test_a_tracker_class_or_another_object_is_refused() -> None:
    with pytest.raises(TypeError, match="pass an instance"):
        filter_trackers(Recorder)
    with pytest.raises(TypeError, match="not accepted"):
        filter_trackers(3)  # type: ignore[arg-type]


def test_init_and_log_kwargs_keys_must_name_a_tracker() -> None:
    assert check_tracker_kwargs("init_kwargs", {"wandb": {"tags": ["a"]}}) == {"wandb": {"tags": ["a"]}}
    with pytest.raises(ValueError, match=r"init_kwargs key='wnadb'.*Did you mean 'wandb'"):
        check_tracker_kwargs("init_kwargs", {"wnadb": {}})
    with pytest.raises(TypeError, match="dict of keyword arguments"):
        check_tracker_kwargs("log_kwargs", {"wandb": ["tags"]})


def test_registered_class_is_built_with_the_project_name_and_its_init_kwargs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="subclass of accel.tracking.GeneralTracker"):
        register_tracker_class(dict)  # type: ignore[arg-type]
    register_tracker_class(Recorder)
    try:
        assert filter_trackers("recorder") == ["recorder"]
        (tracker,) = create_trackers(["recorder"], "proj", tmp_path, {"recorder": {"colour": "red"}})
        assert isinstance(tracker, Recorder) and (tracker.run_name, tracker.options) == ("proj", {"colour": "red"})
        with pytest.warns(UserWarning, match="replaces"):
            register_tracker_class(Recorder)
    finally:
        del LOGGER_TYPE_TO_CLASS["recorder"]


def test_trackers_get_the_logging_dir_positionally_or_by_keyword(tmp_path: Path) -> None:
    from accel.tracking import JSONLinesTracker, MLflowTracker

    jsonl, mlflow = create_trackers(["jsonl", "mlflow"], "proj", tmp_path, {})
    assert isinstance(jsonl, JSONLinesTracker) and jsonl.folder == tmp_path / "proj"
    assert isinstance(mlflow, MLflowTracker) and mlflow.logging_dir == tmp_path


def test_logger_type_is_accelerates_enum() -> None:
    assert str(LoggerType.TENSORBOARD) == "tensorboard" and "wandb" in LoggerType and "nope" not in LoggerType
    assert LoggerType.list()[:3] == ["all", "aim", "tensorboard"]
