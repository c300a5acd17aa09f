"""LocalSGD with 2 real processes: parameters drift apart between averagings (no gradient all-reduce)
and every `local_sgd_steps`-th step, and the block's exit, replace them by their mean."""

from __future__ import annotations

import pytest
from launching import Launched, launch


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("local_sgd_script.py")
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _mean(first: list[float], second: list[float]) -> list[float]:
    return [(a + b) / 2 for a, b in zip(first, second)]


def test_parameters_drift_apart_then_are_averaged_every_local_sgd_steps(run: Launched) -> None:
    first, second = run.of("local")
    # step 1: no averaging, and no gradient all-reduce inside the block, so the ranks differ
    assert first[0] != second[0] and first[1] == first[0] and second[1] == second[0]
    # step 2: local_sgd.step() averages: both ranks hold the mean of what they had
    assert first[2] != second[2]
    assert first[3] == second[3] == pytest.approx(_mean(first[2], second[2]), abs=1e-6)
    # step 3: apart again; leaving the block averages once more
    assert first[5] != second[5]
    after = run.of("after_exit")
    assert after[0] == after[1] == pytest.approx(_mean(first[5], second[5]), abs=1e-6)


def test_disabled_local_sgd_only_counts(run: Launched) -> None:
    first, second = run.of("disabled")
    assert first[:2] == second[:2] == [False, 1]
    # DDP's own gradient all-reduce keeps the ranks equal outside LocalSGD
    assert first[2] == second[2]
