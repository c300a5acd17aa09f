"""Prepared dataloaders on 2 real processes give what Accelerate's give (accelerate_parity_script.py):
dispatched batches (the default for an IterableDataset), sharded ones, gather_for_metrics,
end_of_dataloader, remainder and len, scenario by scenario, on every rank."""

from __future__ import annotations

import pytest
from accelerate_parity_script import SCENARIOS
from launching import Launched, launch


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("accelerate_parity_script.py", timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_rank_sees_what_accelerate_gives_it(run: Launched, name: str) -> None:
    for rank, seen in enumerate(run.of(name)):
        assert seen["accel"] == seen["accelerate"], f"rank {rank}"
        assert seen["accel"]["epochs"][0], "a scenario with no batch checks nothing"
