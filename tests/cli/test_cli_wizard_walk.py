"""Every config `accel config` can write on this machine passes the launch check, and `accel test` passes on
a set of them that takes every answer the wizard offers at least once (tests/cli/wizard_walk.py walks them)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

from accel.cli import capabilities
from accel.cli.config import wizard
from accel.cli.config.check import check_values
from accel.cli.config.file import load_config, render, write_atomically
from tests.cli.wizard_walk import every_answer_set

Leaf = tuple[dict[str, Any], list[str]]


@functools.cache
def leaves() -> tuple[Leaf, ...]:
    machine = wizard.Machine(gpus=capabilities.gpu_count(), cores=capabilities.cpu_cores())
    return tuple(every_answer_set(machine))


def covering(all_leaves: tuple[Leaf, ...]) -> list[Leaf]:
    """Few leaves that together take every answer of every question at least once (greedy set cover,
    one-process leaves first where they cover as much: they are the cheaper runs)."""
    missing = {answer for _, taken in all_leaves for answer in taken}
    chosen: list[Leaf] = []
    while missing:
        best = max(all_leaves, key=lambda leaf: (len(missing & set(leaf[1])), -leaf[0]["num_processes"]))
        chosen.append(best)
        missing -= set(best[1])
    return chosen


def test_the_walk_reaches_every_precision_backend_mode_and_sharding_choice() -> None:
    taken = {answer for _, answers in leaves() for answer in answers}
    precisions = {a.split(" -> ")[1] for a in taken if a.startswith("Which precision")}
    assert {"no", "bf16", "fp8", "bf16-true", "64-true"} <= precisions  # what runs on every CPU
    assert any(a.startswith("Which FP8 backend? -> native") for a in taken)
    assert any("FSDP" in a and a.endswith("True") for a in taken)
    assert len(leaves()) > 50


def test_every_config_the_wizard_can_write_passes_the_launch_check_and_reads_back(tmp_path: Path) -> None:
    for answers, taken in leaves():
        check_values(answers)  # what `accel launch` checks before it starts processes; raises if it cannot run
        path = tmp_path / "config.yaml"
        write_atomically(path, render(answers))
        assert load_config(path, "test") == answers, taken


def test_accel_test_passes_with_configs_taking_every_answer(clean_env: dict[str, str], tmp_path: Path) -> None:
    chosen = covering(leaves())
    assert len(chosen) <= 16, [taken for _, taken in chosen]  # keeps this test a few minutes
    runs: list[tuple[list[str], subprocess.Popen[str]]] = []
    for index, (answers, taken) in enumerate(chosen):
        config = tmp_path / f"config{index}.yaml"
        write_atomically(config, render(answers))
        if len(runs) >= 2:  # two at a time on two cores
            _finish(*runs.pop(0))
        runs.append((taken, subprocess.Popen(
            [sys.executable, "-m", "accel", "test", "--config_file", str(config)], cwd=tmp_path, env=clean_env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )))
    for run in runs:
        _finish(*run)


def _finish(taken: list[str], process: subprocess.Popen[str]) -> None:
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0 and "accel test: PASS" in output, "\n".join([*taken, output])
