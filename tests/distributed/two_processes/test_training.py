"""DDP training with 2 real processes: replicas stay identical in every precision, accumulation
skips the all-reduce, and 2 processes of batch B train like 1 process of batch 2B."""

from __future__ import annotations

import pytest
import torch

from launching import Launched, launch
from training_script import train

PRECISIONS = ("no", "fp16", "bf16", "fp8")  # fp8: the native backend, which runs on the CPU


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("training_script.py", *PRECISIONS, timeout=180)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.parametrize("precision", PRECISIONS)
def test_parameters_are_identical_on_every_process(run: Launched, precision: str) -> None:
    first, second = run.of(f"parameters_{precision}")
    assert first == second
    assert all(agreed["moved"][0] > 1e-3 for agreed in run.of(f"agreed_{precision}"))  # it did train


@pytest.mark.parametrize("precision", ["no", "fp16", "bf16"])
def test_gradients_are_all_reduced_only_on_micro_batches_that_sync(run: Launched, precision: str) -> None:
    for agreed in run.of(f"agreed_{precision}"):
        assert agreed["sync"] and all(agreed["sync"])
        assert agreed["no_sync"] and not any(agreed["no_sync"])


def test_the_model_is_wrapped_in_ddp_and_its_weights_keep_their_names(run: Launched) -> None:
    for agreed in run.of("agreed_no"):
        assert agreed["wrapped"] == [True]
        assert agreed["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_two_processes_of_batch_b_train_like_one_process_of_batch_2b(run: Launched) -> None:
    reference, _ = train("no", batch_size=8)
    two_processes = run.of("parameters_no")[0]
    torch.testing.assert_close(torch.tensor(two_processes), torch.tensor(reference), rtol=1e-5, atol=1e-6)
