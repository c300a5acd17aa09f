"""confirm_visible: the main process's check, before publishing a sharded checkpoint, that every
process's files are in its work folder with the sizes they were written with (real files)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from accel.checkpointing import CheckpointNotPublishedError, CheckpointWriteError
from accel.checkpointing.visibility import confirm_visible


def _files(folder: Path, sizes: dict[str, int]) -> dict[str, int]:
    for name, size in sizes.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x" * size)
    return sizes


def test_every_file_seen_with_its_size_gives_their_names(tmp_path: Path) -> None:
    written = [_files(tmp_path, {"shards/.metadata": 5, "shards/__0_0.distcp": 9}), _files(tmp_path, {"shards/__1_0.distcp": 7})]
    assert confirm_visible(tmp_path, written, tmp_path / "ckpt", grace=0) == [
        "shards/.metadata", "shards/__0_0.distcp", "shards/__1_0.distcp",
    ]


def test_missing_and_resized_files_are_named_with_their_processes(tmp_path: Path) -> None:
    _files(tmp_path, {"shards/__0_0.distcp": 9, "shards/__2_0.distcp": 3})
    written = [{"shards/__0_0.distcp": 9}, {"shards/__1_0.distcp": 7}, {"shards/__2_0.distcp": 4}]
    start = time.monotonic()
    with pytest.raises(CheckpointNotPublishedError) as raised:
        confirm_visible(tmp_path, written, tmp_path / "checkpoint_3", grace=0.3)
    assert time.monotonic() - start >= 0.3  # looked again before failing
    message = str(raised.value)
    assert "did not publish the checkpoint" in message and "checkpoint_3" in message
    assert "process(es) [1, 2]" in message
    assert "process 1: shards/__1_0.distcp (7 bytes) is missing" in message
    assert "process 2: shards/__2_0.distcp has 3 bytes there, the process wrote 4" in message
    assert "process 0" not in message and "Nothing was published" in message
    assert isinstance(raised.value, CheckpointWriteError)  # what scripts catching a failed save catch


def test_a_long_list_is_shortened(tmp_path: Path) -> None:
    written = [{}, {f"shards/__1_{i}.distcp": 1 for i in range(10)}]
    with pytest.raises(CheckpointNotPublishedError, match="and 4 more"):
        confirm_visible(tmp_path, written, tmp_path / "ckpt", grace=0)


def test_a_file_that_shows_up_within_the_grace_period_is_accepted(tmp_path: Path) -> None:
    late = threading.Timer(0.2, lambda: _files(tmp_path, {"shards/__1_0.distcp": 7}))
    late.start()
    try:
        assert confirm_visible(tmp_path, [{}, {"shards/__1_0.distcp": 7}], tmp_path / "ckpt", grace=5) == [
            "shards/__1_0.distcp"
        ]
    finally:
        late.join()
