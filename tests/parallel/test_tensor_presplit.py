"""A model transformers split already (`from_pretrained(tp_plan="auto", device_mesh=accelerator.torch_device_mesh)`,
Accelerate's documented way and its nd_parallel.py example's) prepared on 2 real processes: `prepare` leaves each
process its slice (process 0's parameters are sent only where they are whole tensors) and the steps give one
process's losses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed" / "two_processes"))
from launching import launch  # noqa: E402
from tensor_tiny import make_llama  # noqa: E402

HERE = Path(__file__).parent


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_model_split_by_transformers_trains_as_one_process(tmp_path: Path) -> None:
    make_llama().save_pretrained(tmp_path / "tiny-llama")
    runs = {}
    for processes in (1, 2):
        done = launch(str(HERE / "presplit_script.py"), str(tmp_path / "tiny-llama"), str(processes),
                      processes=processes, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        runs[processes] = done
    assert all("DTensor" in split for split in runs[2].of("split"))  # transformers split it before prepare
    assert runs[2].of("kept") == [True, True]  # still the slices transformers gave each process
    reference = runs[1].of("losses")[0]
    for losses in runs[2].of("losses"):
        assert losses == pytest.approx(reference, rel=1e-5)
