"""ProjectConfiguration and automatic checkpoints: checkpoint_<n> naming, total_limit rotation,
the newest complete checkpoint picked on loading, and a counter that continues after resuming."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from accel import Accelerator, ProjectConfiguration
from accel.checkpointing import CheckpointError


def _names(project: Path) -> list[str]:
    folder = project / "checkpoints"
    return sorted((path.name for path in folder.iterdir()), key=lambda name: (len(name), name))


def _accelerator(project: Path, total_limit: int | None = None, weight: float = 0.0) -> tuple[Accelerator, nn.Module]:
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir=project, total_limit=total_limit))
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(weight)
    return accelerator, accelerator.prepare(model)


# ----------------------------------------------------------------------------- configuration


def test_project_configuration_has_accelerates_fields_and_checks_every_assignment(tmp_path: Path) -> None:
    config = ProjectConfiguration(project_dir=str(tmp_path), total_limit=3)
    assert config.project_dir == str(tmp_path)  # a str, as Accelerate's fields
    assert config.logging_dir == str(tmp_path)  # Accelerate: logging_dir defaults to project_dir
    assert config.checkpoints_dir == tmp_path / "checkpoints"
    assert (config.automatic_checkpoint_naming, config.iteration, config.save_on_each_node) == (True, 0, False)
    config.iteration = 5  # Accelerate scripts set it after resuming
    assert config.iteration == 5
    with pytest.raises(ValueError, match=r"iteration=-1 is not accepted: give an int >= 0"):
        config.iteration = -1
    with pytest.raises(ValueError, match=r"total_limit=0 is not accepted"):
        config.total_limit = 0
    assert (config.iteration, config.total_limit) == (5, 3)  # a refused value leaves the field as it was
    assert ProjectConfiguration(str(tmp_path), "logs").logging_dir == "logs"  # Accelerate's field order
    with pytest.raises(TypeError, match="unexpected keyword argument 'total_limits'"):
        ProjectConfiguration(total_limits=3)  # type: ignore[call-arg]


def test_set_directories_fills_logging_dir_only_when_unset(tmp_path: Path) -> None:
    config = ProjectConfiguration(logging_dir=tmp_path / "logs")
    config.set_directories(tmp_path)
    assert (config.project_dir, config.logging_dir) == (str(tmp_path), str(tmp_path / "logs"))
    bare = ProjectConfiguration()
    assert (bare.project_dir, bare.logging_dir) == (None, None)
    bare.set_directories(str(tmp_path / "p"))
    assert (bare.project_dir, bare.logging_dir) == (str(tmp_path / "p"), str(tmp_path / "p"))


def test_save_on_each_node_is_refused_only_on_several_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ProjectConfiguration(save_on_each_node=True).save_on_each_node is True  # one machine: the same thing
    for name, value in {"WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"save_on_each_node=True is not supported: this run spans several machines"):
        ProjectConfiguration(save_on_each_node=True)
    assert ProjectConfiguration(save_on_each_node=False).save_on_each_node is False


def test_the_accelerator_keeps_the_configuration_it_was_given(tmp_path: Path) -> None:
    config = ProjectConfiguration(total_limit=2)
    accelerator = Accelerator(project_dir=tmp_path, project_config=config)
    assert accelerator.project_configuration is config
    assert (config.project_dir, config.logging_dir) == (str(tmp_path), str(tmp_path))


@pytest.mark.parametrize("value", [0, -1, "3", 2.5, True])
def test_total_limit_must_be_a_positive_int_or_none(value: object) -> None:
    expected = rf"ProjectConfiguration.total_limit={value!r} is not accepted: give an int >= 1.*or None"
    with pytest.raises(ValueError, match=expected):
        ProjectConfiguration(total_limit=value)  # type: ignore[arg-type]


def test_other_fields_are_checked() -> None:
    with pytest.raises(TypeError, match="ProjectConfiguration.project_dir=5 is not accepted: give a folder path"):
        ProjectConfiguration(project_dir=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ProjectConfiguration.project_dir='' is not accepted"):
        ProjectConfiguration(project_dir="")
    with pytest.raises(TypeError, match="ProjectConfiguration.logging_dir=3 is not accepted"):
        ProjectConfiguration(logging_dir=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="save_on_each_node=1 must be True or False"):
        ProjectConfiguration(save_on_each_node=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="automatic_checkpoint_naming='yes' must be True or False"):
        ProjectConfiguration(automatic_checkpoint_naming="yes")  # type: ignore[arg-type]


def test_project_dir_is_a_shortcut_for_the_configuration(tmp_path: Path) -> None:
    assert Accelerator(project_dir=str(tmp_path)).project_configuration == ProjectConfiguration(project_dir=tmp_path)
    assert Accelerator(project_dir=tmp_path).project_dir == str(tmp_path)
    assert Accelerator().project_dir is None
    filled = Accelerator(project_dir=tmp_path, project_config=ProjectConfiguration(total_limit=2))
    assert filled.project_configuration == ProjectConfiguration(project_dir=tmp_path, total_limit=2)
    same = Accelerator(project_dir=tmp_path, project_config=ProjectConfiguration(project_dir=str(tmp_path)))
    assert same.project_dir == str(tmp_path)


def test_two_different_project_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="project_dir='.*/a' and project_config with project_dir='.*/b'.*Give it once"):
        Accelerator(project_dir=tmp_path / "a", project_config=ProjectConfiguration(project_dir=tmp_path / "b"))
    with pytest.raises(TypeError, match="project_config=.*give a ProjectConfiguration"):
        Accelerator(project_config={"project_dir": "x"})  # type: ignore[arg-type]


def test_without_automatic_naming_save_state_needs_a_folder(tmp_path: Path) -> None:
    config = ProjectConfiguration(project_dir=tmp_path, automatic_checkpoint_naming=False)
    with pytest.raises(ValueError, match="automatic_checkpoint_naming=False"):
        Accelerator(project_config=config).save_state()


# ----------------------------------------------------------------------------- automatic checkpoints


def test_automatic_checkpoints_are_numbered_and_rotated_oldest_first(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path, total_limit=2)
    paths = [accelerator.save_state() for _ in range(4)]
    assert paths == [tmp_path / "checkpoints" / f"checkpoint_{n}" for n in range(4)]
    assert _names(tmp_path) == ["checkpoint_2", "checkpoint_3"]
    assert accelerator.save_iteration == 4


def test_total_limit_one_keeps_only_the_newest(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path, total_limit=1)
    for _ in range(3):
        accelerator.save_state()
    assert _names(tmp_path) == ["checkpoint_2"]


def test_load_picks_the_newest_and_the_counter_continues_after_resuming(tmp_path: Path) -> None:
    first, model = _accelerator(tmp_path, total_limit=2)
    for step in range(3):
        with torch.no_grad():
            model.weight.fill_(step)
        first.save_state()
    second, resumed = _accelerator(tmp_path, total_limit=2, weight=-1.0)
    assert second.load_state() == tmp_path / "checkpoints" / "checkpoint_2"
    assert torch.equal(resumed.weight, torch.full((2, 2), 2.0))
    assert second.save_state() == tmp_path / "checkpoints" / "checkpoint_3"
    assert _names(tmp_path) == ["checkpoint_2", "checkpoint_3"]  # never the newest, never the resumed-from


def test_a_fresh_run_in_an_old_project_never_overwrites(tmp_path: Path) -> None:
    old, _ = _accelerator(tmp_path)
    old.save_state()
    old.save_state()
    new, _ = _accelerator(tmp_path)
    assert new.save_state() == tmp_path / "checkpoints" / "checkpoint_2"


def test_load_skips_a_folder_that_is_not_complete(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path)
    accelerator.save_state()
    (tmp_path / "checkpoints" / "checkpoint_7").mkdir()
    other, _ = _accelerator(tmp_path)
    with pytest.warns(UserWarning, match="skipping .*checkpoint_7.*no manifest.json"):
        assert other.load_state() == tmp_path / "checkpoints" / "checkpoint_0"


def test_a_damaged_newest_checkpoint_is_reported_not_skipped(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path)
    accelerator.save_state()
    newest = accelerator.save_state()
    (newest / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="checkpoint_1.*model.safetensors has 0 bytes"):
        _accelerator(tmp_path)[0].load_state()


def test_load_without_checkpoints_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint in .*checkpoints.* yet"):
        _accelerator(tmp_path)[0].load_state()


def test_an_explicit_folder_wins_over_the_project_and_counts(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path / "project")
    assert accelerator.save_state(tmp_path / "elsewhere") == tmp_path / "elsewhere"
    assert accelerator.save_state() == tmp_path / "project" / "checkpoints" / "checkpoint_1"


def test_leftovers_of_killed_saves_are_hidden_and_cleared(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path)
    accelerator.save_state()
    dead = _dead_pid()
    leftover = tmp_path / "checkpoints" / f".checkpoint_1.tmp-{dead}-0123abcd"
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"partial")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _accelerator(tmp_path)[0].load_state() == tmp_path / "checkpoints" / "checkpoint_0"
    accelerator.save_state()
    assert _names(tmp_path) == ["checkpoint_0", "checkpoint_1"]


def test_a_leftover_whose_pid_another_process_now_has_is_still_cleared(tmp_path: Path) -> None:
    # pids are reused (32,768 of them on many Linux machines): the start time in the name tells them apart
    from accel.checkpointing.naming import _start_time

    accelerator, _ = _accelerator(tmp_path)
    accelerator.save_state()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = _start_time(other.pid)
        assert start is not None, "Linux's /proc gives each process's start time"
        reused = tmp_path / "checkpoints" / f".checkpoint_1.tmp-{other.pid}-{start + 1}-0123abcd"
        alive = tmp_path / "checkpoints" / f".checkpoint_9.tmp-{other.pid}-{start}-4567abcd"
        reused.mkdir()
        alive.mkdir()
        accelerator.save_state()
        assert not reused.exists() and alive.exists()  # a live writer's folder is left alone
    finally:
        other.kill()
        other.wait()


def test_overwriting_an_explicit_checkpoint_replaces_it_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accel.checkpointing import writer

    accelerator, model = _accelerator(tmp_path / "project")
    folder = tmp_path / "latest"
    for weight, exchange in ((1.0, True), (2.0, True), (3.0, False)):
        if not exchange:  # the fallback where renameat2 is missing: move aside, then rename
            monkeypatch.setattr(writer, "_exchange", lambda a, b: False)
        with torch.no_grad():
            model.weight.fill_(weight)
        accelerator.save_state(folder)
        assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no leftovers
        other, loaded = _accelerator(tmp_path / "other")
        other.load_state(folder)
        assert torch.equal(loaded.weight, torch.full((2, 2), weight))


def test_an_interrupted_overwrite_points_to_the_previous_version(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path / "project")
    folder = accelerator.save_state(tmp_path / "latest")
    aside = tmp_path / f".latest.old-{_dead_pid()}-0123abcd"
    folder.rename(aside)  # what a kill between the two renames of the fallback leaves
    expected = f"no such folder. An interrupted save left its previous version at '{aside}'"
    with pytest.raises(FileNotFoundError, match=expected):
        _accelerator(tmp_path / "other")[0].load_state(folder)


def test_the_next_save_puts_back_what_an_interrupted_overwrite_moved_aside(tmp_path: Path) -> None:
    accelerator, _ = _accelerator(tmp_path / "project", weight=5.0)
    folder = accelerator.save_state(tmp_path / "latest")
    dead = _dead_pid()
    folder.rename(tmp_path / f".latest.old-{dead}-0123abcd")  # killed between the two renames
    (tmp_path / f".latest.tmp-{dead}-4567abcd").mkdir()  # and the new version it was writing
    (tmp_path / f".gone.del-{dead}-89abcdef").mkdir()  # a deletion that was under way
    accelerator.save_state(tmp_path / "elsewhere")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["elsewhere", "latest"]
    other, model = _accelerator(tmp_path / "other")
    other.load_state(tmp_path / "latest")
    assert torch.equal(model.weight, torch.full((2, 2), 5.0))


def test_an_empty_folder_can_be_saved_into(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    accelerator, _ = _accelerator(tmp_path / "project")
    assert accelerator.save_state(tmp_path / "ckpt") == tmp_path / "ckpt"
    assert (tmp_path / "ckpt" / "manifest.json").is_file()


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid
