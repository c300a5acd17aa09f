"""Which failure the launcher reports when several processes failed: the one that caused the others."""

from __future__ import annotations

import json
import os
from pathlib import Path

from accel.cli.launch.first_failure import FIRST, first_record, lost_peer
from accel.distributed.errors import CollectiveError


def _write(folder: Path, rank: int, **fields: object) -> Path:
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps({"rank": str(rank), "summary": f"error {rank}", "shown": True, **fields}))
    return path


def test_a_timeout_is_a_failure_of_its_own_and_a_peer_that_left_is_not() -> None:
    assert lost_peer(CollectiveError("m", rank=0, operation="reduce", reason="peer left"))
    assert not lost_peer(CollectiveError("m", rank=0, operation="reduce", reason="timeout"))
    assert lost_peer(RuntimeError("[pair.cc:537] Read error: Connection reset by peer"))
    assert not lost_peer(ValueError("bad value"))


def test_the_first_claim_is_reported_unless_it_only_lost_a_peer_to_another_failure(tmp_path: Path) -> None:
    os.link(_write(tmp_path, 0, lost_peer=True, reason="peer left", operation="gather_object"), tmp_path / FIRST)
    assert first_record(tmp_path)["rank"] == 0  # nobody else failed on its own: the claim stands
    _write(tmp_path, 1, lost_peer=False, reason="timeout", operation="wait_for_everyone (barrier)")
    cause = first_record(tmp_path)
    assert cause["rank"] == 1 and cause["reason"] == "timeout" and cause["operation"] == "wait_for_everyone (barrier)"


def test_a_first_claim_of_its_own_stands(tmp_path: Path) -> None:
    os.link(_write(tmp_path, 1, lost_peer=False, reason=None), tmp_path / FIRST)
    _write(tmp_path, 0, lost_peer=False, reason=None)
    assert first_record(tmp_path)["rank"] == 1


def test_no_claim_is_no_record(tmp_path: Path) -> None:
    assert first_record(tmp_path) == {}
