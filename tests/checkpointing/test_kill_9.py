"""kill -9 at any moment of training or saving loses nothing: resuming from the newest
checkpoint each time ends with the parameters of the run that was never interrupted.

Real processes (forked from a server that has imported torch), real SIGKILLs, real files. Two
kinds of moments: seeded random delays after the process has resumed, and deterministic stops
just before each fsync / rename / rmtree of a save (every step of the atomic write and of the
rotation of old checkpoints), with blocking saves and with asynchronous ones (save_state(async_save=True):
the write runs in a background thread while training goes on). After every kill, each checkpoint_<n> folder must be complete.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from accel.checkpointing import open_checkpoint
from accel.checkpointing.naming import numbered_checkpoints
from checkpoint_processes import ForkServer
from checkpoint_scenario import Job

UNTIL = 100
SAVE_EVERY = 4
TOTAL_LIMIT = 2
STEPS_OF_A_SAVE = 16
"""fsync/rename/rmtree calls from set-up through the first save and its rotation, and a few more."""


def _kill_moments(seed: int, random_kills: int, duration: float, save_steps: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    moments = [{"die_at": step} for step in range(1, save_steps + 1)]
    moments += [{"kill_after": rng.uniform(0.0, duration / 40)} for _ in range(random_kills)]
    rng.shuffle(moments)
    return moments


def _assert_every_checkpoint_is_whole(checkpoints: Path) -> None:
    found = numbered_checkpoints(checkpoints)
    assert len(found) <= TOTAL_LIMIT + 1, [path.name for _, path in found]
    for _, folder in found:
        open_checkpoint(folder, f"checkpoint {folder.name}")


@pytest.mark.parametrize(
    ("precision", "poison", "random_kills", "save_steps", "async_save"),
    [("no", (), 24, STEPS_OF_A_SAVE, False), ("fp16", (9, 10, 31, 70), 8, 8, False), ("no", (), 16, 12, True)],
    ids=["fp32", "fp16-with-overflows", "fp32-async-save"],
)
def test_kill_9_anywhere_then_resume_matches_the_uninterrupted_run(
    fork_server: ForkServer, tmp_path: Path, precision: str, poison: tuple[int, ...], random_kills: int, save_steps: int,
    async_save: bool,
) -> None:
    log = tmp_path / "children.log"
    base = Job(precision=precision, until=UNTIL, save_every=SAVE_EVERY, total_limit=TOTAL_LIMIT, poison=poison,
               async_save=async_save)
    straight = dataclasses.replace(base, project_dir=str(tmp_path / "straight"), result=str(tmp_path / "straight.st"))
    outcome = fork_server.start([dataclasses.asdict(straight)], log)
    assert (outcome["outcome"], outcome["code"]) == ("exited", 0), log.read_text()
    job = dataclasses.asdict(
        dataclasses.replace(base, project_dir=str(tmp_path / "run"), resume=True, result=str(tmp_path / "run.st"))
    )
    kills = kills_mid_save = 0
    checkpoints = tmp_path / "run" / "checkpoints"
    for moment in _kill_moments(6, random_kills, outcome["seconds"], save_steps):
        outcome = fork_server.start([job], log, **moment)
        assert outcome["outcome"] == "killed" or outcome["code"] == 0, log.read_text()
        kills += outcome["outcome"] == "killed"
        kills_mid_save += outcome["outcome"] == "killed" and any(checkpoints.glob(".checkpoint_*"))
        _assert_every_checkpoint_is_whole(checkpoints)
    outcome = fork_server.start([job], log)
    assert (outcome["outcome"], outcome["code"]) == ("exited", 0), log.read_text()
    assert kills >= random_kills + save_steps - 2, f"only {kills} kills landed before the run ended"
    assert kills_mid_save >= save_steps // 2, f"only {kills_mid_save} of {kills} kills fell inside a save"
    expected, resumed = load_file(tmp_path / "straight.st"), load_file(tmp_path / "run.st")
    for name, value in expected.items():
        assert torch.isfinite(value).all(), name
        assert torch.equal(value, resumed[name]), f"{name} differs from the uninterrupted run"
