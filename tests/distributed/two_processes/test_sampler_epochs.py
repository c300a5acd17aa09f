"""Two real processes of batch B see, in every epoch, what one process of batch 2B sees with torch's
own DataLoader, with the DataLoader's generator and with the global RNG (issue 11, item 3)."""

from __future__ import annotations

import pytest
from launching import Launched, launch
from sampler_epochs_script import EPOCHS, reference


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("sampler_epochs_script.py")
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.parametrize("name", ["generator", "global"])
def test_every_epoch_of_two_processes_is_one_process_with_twice_the_batch(run: Launched, name: str) -> None:
    expected, _ = reference(name == "generator")
    first, second = run.of(f"{name}_epochs")
    assert len(first) == len(second) == EPOCHS
    for epoch, big_batches in enumerate(expected):
        assert len(first[epoch]) == len(second[epoch]) == len(big_batches)
        for step, big in enumerate(big_batches):
            together = first[epoch][step] + second[epoch][step]
            assert together[: len(big)] == big, f"epoch {epoch}, step {step}"


def test_the_generator_advances_as_torchs_sampler_advances_it(run: Launched) -> None:
    _, expected = reference(True)
    assert run.of("generator_fingerprints") == [expected, expected]
