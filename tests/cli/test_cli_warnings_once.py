"""A slow precision is said once: in the CLI in the tool's words, in a launch once for all ranks.

`accel launch` says each PrecisionWarning its configuration check meets as one line of its own,
and passes the digests to the processes (ACCEL_SAID_WARNINGS) so that no rank repeats them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from accel import _warnings
from accel._warnings import SAID_VARIABLE, PrecisionWarning, collect_precision_warnings, digest, warn_once
from accel.cli import capabilities

BF16_IS_SLOW = capabilities.speed_note("bf16", torch.device("cpu")) is not None
needs_slow_bf16 = pytest.mark.skipif(not BF16_IS_SLOW, reason="this CPU has native bf16 matrix instructions: "
                                     "no slowness warning to say")
ACCELERATOR_SCRIPT = "from accel import Accelerator\nAccelerator()\nprint('built', flush=True)\n"


@pytest.fixture(autouse=True)
def fresh_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_warnings, "_given", set())


def test_a_warning_the_launcher_said_is_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SAID_VARIABLE, ",".join([digest("said by the launcher"), "0123456789abcdef"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_once("said by the launcher")
        warn_once("not said by the launcher")
        _warnings._given.clear()
        warn_once("said by the launcher", UserWarning)  # only PrecisionWarnings are said by the launcher
    assert [(str(w.message), w.category) for w in caught] == [
        ("not said by the launcher", PrecisionWarning), ("said by the launcher", UserWarning)
    ]


def test_collected_warnings_are_not_warned_nor_remembered() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with collect_precision_warnings() as found:
            warn_once("slow here")
            warn_once("slow here")
        assert found == ["slow here"] and caught == []
        warn_once("slow here")  # a training run later in the process still says it
    assert [str(w.message) for w in caught] == ["slow here"]


def test_a_warning_points_at_the_users_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from accel.backends.registry import create_backend
        from accel.kwargs_handlers import Handlers

        _warnings.warn_once("from inside accel")  # this test module is outside the package
        create_backend("no", torch.device("cpu"), Handlers())
    assert caught[0].filename == __file__


@needs_slow_bf16
def test_accel_env_and_config_say_it_in_their_own_words(run_accel) -> None:
    result = run_accel("env")
    assert result.returncode == 0
    assert "Warning" not in result.stderr and result.stderr == ""
    assert "bf16       runs (slow: this CPU has no native bfloat16" in result.stdout


@needs_slow_bf16
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_launch_says_it_once(run_accel, tmp_path: Path, processes: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(ACCELERATOR_SCRIPT)
    result = run_accel("launch", "--num_processes", processes, "--mixed_precision", "bf16", str(script))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("built") == int(processes)
    slow = [line for line in result.stderr.splitlines() if "will be slow here" in line]
    assert len(slow) == 1, result.stderr
    assert slow[0].startswith("accel launch: warning: mixed_precision='bf16' will be slow here: this CPU")
    assert "PrecisionWarning" not in result.stderr and "ACCEL_SAID_WARNINGS" not in result.stderr
