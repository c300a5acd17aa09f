"""A sharded save_state publishes only what loads, and a restart loads the newest complete checkpoint.

Real processes (sharded_publish_script.py, 2 under FSDP2 on gloo). Separate disks are simulated
by a relative project_dir resolved from a working directory of each process's own: the main
process hands every process the same path, as on machines that each mount a disk there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launching import Launched, launch

from accel.checkpointing import open_checkpoint

SCRIPT = "../../fsdp/sharded_publish_script.py"  # launching.py resolves scripts beside itself


def _run(mode: str, root: Path, ok: bool = True) -> Launched:
    result = launch(SCRIPT, mode, str(root), timeout=300)
    assert (result.returncode == 0) == ok, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sharded_publish")


def test_shards_the_main_process_cannot_see_fail_every_process_and_publish_nothing(root: Path) -> None:
    result = _run("disks", root / "disks")
    errors = result.of("error")
    assert [kind for kind, _ in errors] == ["CheckpointNotPublishedError"] * 2
    for _, message in errors:
        assert "did not publish the checkpoint 'proj/checkpoints/checkpoint_0'" in message
        assert "process(es) [1]" in message and "shards/__1_0.distcp" in message and "is missing" in message
        assert "__0_0.distcp" not in message  # the main process's own shards are there
        assert "Nothing was published" in message
    assert result.of("listing") == [["proj/checkpoints"]] * 2  # no checkpoint, no work folder, on either disk
    assert not list((root / "disks").rglob("manifest.json"))


def test_shards_every_process_can_see_are_published_and_load(root: Path) -> None:
    result = _run("shared", root / "shared")
    assert result.of("saved") == ["proj/checkpoints/checkpoint_0"] * 2
    checkpoint = root / "shared" / "machine0" / "proj" / "checkpoints" / "checkpoint_0"
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    shards = {"shards/.metadata", "shards/__0_0.distcp", "shards/__1_0.distcp"}
    assert shards <= set(manifest["files"])
    assert {p.name for p in (checkpoint / "shards").iterdir()} == {name.split("/")[1] for name in shards}
    open_checkpoint(checkpoint, "checkpoint")  # every file against the manifest
    assert result.of("loaded") == ["proj/checkpoints/checkpoint_0"] * 2
    assert result.of("after_load")[0] == result.of("at_save")[0]  # weights and optimizer state, exactly
    confirm, save = result.of("confirm_seconds")[0], result.of("save_seconds")[0]
    assert confirm is not None and confirm < 0.05 * save, (confirm, save)


@pytest.fixture(scope="module")
def restarted(root: Path) -> tuple[Launched, Launched]:
    killed = _run("kill", root / "kill", ok=False)
    return killed, _run("restart", root / "kill")


def test_a_restart_after_a_save_killed_before_publishing_loads_the_newest_complete_checkpoint(
    restarted: tuple[Launched, Launched],
) -> None:
    killed, again = restarted
    assert killed.of("killing") == [True] * 2  # both were in the second save
    before = again.of("before")[0]
    hidden = [name for name in before if name.startswith("proj/checkpoints/.checkpoint_1.tmp-")]
    assert hidden and any(name.endswith("/manifest.json") for name in before if name.startswith(hidden[0]))
    assert again.of("loaded") == ["checkpoint_0"] * 2  # not the complete-looking but unpublished checkpoint_1
    assert again.of("state")[0] == killed.of("at_zero")[0]
    assert again.of("saved_next") == ["checkpoint_1"] * 2
    assert not [name for name in again.of("after")[0] if "/.checkpoint_" in name]  # the killed save's work folder is gone
