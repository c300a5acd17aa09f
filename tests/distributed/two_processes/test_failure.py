"""A process that raises ends the whole run: `accel launch` exits non-zero, soon, naming the rank."""

from __future__ import annotations

from launching import launch


def test_a_failing_rank_stops_every_process_and_is_named() -> None:
    result = launch("failing_script.py", timeout=90)
    assert result.returncode != 0
    assert result.seconds < 60
    assert "rank 1 fails on purpose" in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("(rank 1 of 2)")
