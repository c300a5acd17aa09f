"""save_state with 2 real processes in a second process group of the same processes (a second
Accelerator after end_training, a group the script destroyed, groups the script made itself, a
group destroyed while an asynchronous save is written): every save in the new group takes both
processes, nothing waits for a session of the old group, and the background write is published
to the processes of the group it started in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launching import launch

CHECKPOINTS = ("first_a", "first_b", "second", "second_async")


@pytest.mark.parametrize("how", ["end_training", "destroy", "own", "destroy_async"])
def test_saves_in_a_new_process_group_hold_every_process(how: str, tmp_path: Path) -> None:
    result = launch("new_group_save_script.py", str(tmp_path), how, timeout=150)
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(CHECKPOINTS)  # no work folders left
    for name in CHECKPOINTS:
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["num_processes"] == 2 and manifest["process_states"] is None, (name, manifest)
        assert {"random_states_0.pt", "random_states_1.pt"} <= set(manifest["files"]), name
    assert result.of("warnings") == [[], []]  # no save fell back to the main process alone
    assert result.of("loaded_second") == result.of("second")
    assert result.of("loaded_first_b") == result.of("first_b")
    assert result.seconds < 100  # no save waited out the grace period
