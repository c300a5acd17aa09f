"""A transformers model through ZeRO 3 with 2 real processes: built partitioned (zero3_init_flag), trained, and
saved whole by save_model (every weight gathered from both processes' partitions)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from launching import launch

pytest.importorskip("deepspeed")
pytest.importorskip("transformers")

SCRIPT = str(Path(__file__).parent / "ds_transformers_script.py")


def test_a_llama_built_under_zero3_init_trains_and_save_model_writes_it_whole(tmp_path: Path) -> None:
    run = launch(SCRIPT, str(tmp_path), timeout=400)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.of("built_partitioned") == [True, True]
    saved, shapes = run.results[0]["saved"], run.results[0]["shapes"]
    tied = set(shapes) - set(saved)  # the output head may share the embedding's weight
    assert tied <= {"lm_head.weight"} and all(saved[name] == shapes[name] for name in saved)
    assert run.results[0]["same"] is True
    first, second = run.of("losses")
    assert all(math.isfinite(loss) for loss in first + second)  # gathers on gloo one at a time (docs/deepspeed.md)
    assert first[-1] < first[0] and second[-1] < second[0]  # it learns the 16 fixed sequences
