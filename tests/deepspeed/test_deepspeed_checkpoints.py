"""save_state/load_state under DeepSpeed with 2 real processes: the engine's ZeRO files are the checkpoint's
shards/, and a new Accelerator that loads them trains on exactly as the run that went straight on; save_model
writes the gathered weights (ZeRO 3 too)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from launching import launch

pytest.importorskip("deepspeed")

SCRIPT = str(Path(__file__).parent / "ds_resume_script.py")


@pytest.mark.parametrize("stage", [2, 3])
def test_resume_from_save_state_continues_exactly(stage: int, tmp_path: Path) -> None:
    run = launch(SCRIPT, str(stage), str(tmp_path), timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    losses = [loss for key in ("losses_resumed", "losses_straight") for rank in run.of(key) for loss in rank]
    assert all(math.isfinite(loss) for loss in losses)
    assert run.of("losses_resumed") == run.of("losses_straight")  # bit for bit
    assert run.of("lr_resumed") == run.of("lr_straight")
    assert run.results[0]["weights_resumed"] == run.results[0]["weights_straight"]
    files = run.of("files")[0]
    assert {"shards/.metadata", "scheduler.pt", "manifest.json"} <= set(files)
    assert {"shards/zero_pp_rank_0_mp_rank_00_optim_states.pt", "shards/zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= set(files)
    assert run.results[0]["saved_model_matches"] is True
