"""Asynchronous sharded checkpoints (FSDP2, SHARDED_STATE_DICT) with 2 real processes
(fsdp_async_save_script.py): every process writes its shards in the background, the checkpoint
is published whole and resumes bit-identically although training changed the weights during the
write (FULL_STATE_DICT too, gathered before save_state returns), and a write failing on process 1 is
raised on both at the next call with nothing published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launching import Launched, launch

from accel.checkpointing import open_checkpoint

SCRIPT = str(Path(__file__).parent / "fsdp_async_save_script.py")
SAVE_AT = 5


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fsdp_async_save")


@pytest.fixture(scope="module")
def saved(folder: Path) -> Launched:
    result = launch(SCRIPT, "save", str(folder), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def resumed(saved: Launched, folder: Path) -> Launched:
    result = launch(SCRIPT, "resume", str(folder), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_every_process_writes_its_shards_and_the_checkpoint_is_published_whole(saved: Launched, folder: Path) -> None:
    assert saved.of("run_layout")[0][:2] == ["checkpoints", "checkpoints/checkpoint_1"]  # total_limit=1, no work folder
    checkpoint = folder / "run" / "checkpoints" / "checkpoint_1"
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    assert {"shards/.metadata", "shards/__0_0.distcp", "shards/__1_0.distcp"} <= set(manifest["files"])
    assert manifest["fsdp"]["state_dict_type"] == "SHARDED_STATE_DICT"
    open_checkpoint(checkpoint, "checkpoint")  # every file matches its size and SHA-256


@pytest.mark.parametrize("name", ["run", "full"], ids=["sharded", "full_state_dict"])
def test_the_resumed_run_continues_bit_identically(saved: Launched, resumed: Launched, name: str) -> None:
    assert resumed.of(f"{name}_loaded") == ["checkpoint_1"] * 2
    straight, again = saved.of("straight")[0], resumed.of(f"{name}_resumed")[0]
    assert again["weights"] == straight["weights"] and again["optimizer"] == straight["optimizer"]
    assert resumed.of(f"{name}_resumed_losses")[0] == saved.of("losses")[0][SAVE_AT:]


def test_full_state_dict_is_gathered_before_save_state_returns_and_written_by_the_main_process(
    saved: Launched,
) -> None:
    layout = saved.of("full_layout")[0]
    assert "checkpoints/checkpoint_1/model.safetensors" in layout and "checkpoints/checkpoint_1/optimizer.pt" in layout
    assert not [name for name in layout if "shards" in name or "/." in name]


def test_a_shard_write_failing_on_process_1_is_raised_on_both_and_nothing_is_published(saved: Launched) -> None:
    for message in saved.of("fail_error"):
        assert message is not None
        assert "end_training: the previous save_state(async_save=True)" in message
        assert "process 1" in message and "No space left on device" in message
    assert saved.of("fail_left")[0] == []  # no checkpoint, no work folder
