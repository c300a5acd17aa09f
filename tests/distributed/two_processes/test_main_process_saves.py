"""Saves inside `if accelerator.is_main_process:` with 2 real processes (diffusers' and peft's
pattern): they finish, write complete checkpoints that say whose RNG they hold, and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from launching import Launched, launch


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Launched, Path]:
    folder = tmp_path_factory.mktemp("main_saves")
    result = launch("main_process_save_script.py", str(folder), timeout=150)
    assert result.returncode == 0, result.stderr[-4000:]
    return result, folder


def test_the_run_finishes_and_leaves_only_complete_checkpoints(ran: tuple[Launched, Path]) -> None:
    result, folder = ran
    assert sorted(p.name for p in folder.iterdir()) == [
        "everyone", "helper", "main", "model", "object.pt", "unrecognised"]  # no work folders left
    for name in ("main", "helper", "unrecognised"):
        manifest = json.loads((folder / name / "manifest.json").read_text())
        assert manifest["num_processes"] == 2 and manifest["process_states"] == [0]
        assert "random_states_0.pt" in manifest["files"] and "random_states_1.pt" not in manifest["files"]
    everyone = json.loads((folder / "everyone" / "manifest.json").read_text())
    assert everyone["process_states"] is None and "random_states_1.pt" in everyone["files"]
    assert (folder / "model" / "model.safetensors").is_file()
    assert torch.load(folder / "object.pt", weights_only=True) == {"step": 1}
    assert result.seconds < 100


def test_an_unrecognised_main_only_test_costs_the_grace_wait_and_says_so(ran: tuple[Launched, Path]) -> None:
    result, _ = ran
    assert len(result.results[0]["grace_warning"]) == 1


def test_both_processes_resume_the_main_process_checkpoint(ran: tuple[Launched, Path]) -> None:
    result, _ = ran
    saved = result.results[0]["saved"]
    assert result.of("resumed") == [saved, saved]
    warnings = result.of("load_warnings")
    assert warnings[0] == [] and len(warnings[1]) == 1 and "keeps its own RNG states" in warnings[1][0]
