"""accel.logging.get_logger: Accelerate's process-aware logger, in one process and in two."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "distributed" / "two_processes"))

from launching import launch  # noqa: E402

from accel.logging import get_logger  # noqa: E402


def test_records_go_out_in_one_process_with_the_level_asked(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("accel.test.one", log_level="INFO")
    with caplog.at_level(logging.INFO, logger="accel.test.one"):
        logger.info("hello %s", "there")
        logger.debug("not shown")
        logger.warning("everywhere", main_process_only=False)
    assert [r.getMessage() for r in caplog.records] == ["[RANK 0] hello there", "[RANK 0] everywhere"]
    assert all(r.filename == "test_logging.py" for r in caplog.records)


def test_the_level_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_LOG_LEVEL", "error")
    assert get_logger("accel.test.env").logger.level == logging.ERROR


def test_with_two_processes_only_the_main_one_logs_unless_asked() -> None:
    run = launch("logging_script.py")
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if "MSG" in line]
    assert sum("MSG main-only" in line for line in lines) == 1
    assert sorted(line for line in lines if "MSG every" in line) == ["[RANK 0] MSG every 0", "[RANK 1] MSG every 1"]
    ordered = [line for line in lines if "MSG ordered" in line]
    assert ordered == ["[RANK 0] MSG ordered 0", "[RANK 1] MSG ordered 1"]
