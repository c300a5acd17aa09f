"""torch.compile over DDP with 2 real processes: compiled replicas stay identical, accumulation still
skips the all-reduce through the compiled wrapper, and the result is eager's (1 process, twice the batch)."""

from __future__ import annotations

import pytest
import torch

from launching import Launched, launch
from training_script import train

PRECISIONS = ("no",)


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("compile_script.py", *PRECISIONS, timeout=180)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_models_were_compiled_on_every_process(run: Launched) -> None:
    assert all(frames > 0 for frames in run.of("compiled_frames"))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_compiled_replicas_stay_identical_and_skip_the_all_reduce_when_not_syncing(run: Launched, precision: str) -> None:
    first, second = run.of(f"parameters_{precision}")
    assert first == second
    for agreed in run.of(f"agreed_{precision}"):
        assert agreed["sync"] and all(agreed["sync"])
        assert agreed["no_sync"] and not any(agreed["no_sync"])
        assert agreed["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_compiled_two_processes_train_like_eager_one_process_of_twice_the_batch(run: Launched) -> None:
    reference, _ = train("no", batch_size=8)
    torch.testing.assert_close(torch.tensor(run.of("parameters_no")[0]), torch.tensor(reference), rtol=1e-5, atol=1e-6)


def test_unwrap_model_removes_ddp_under_the_compiled_wrapper_without_changing_the_model(run: Launched) -> None:
    for names in run.of("unwrapped"):
        # prepared: compiled over DDP; kept compiled: a compiled wrapper around the user's Linear
        assert names == ["OptimizedModule", "DistributedDataParallel", "OptimizedModule", "Linear", "Linear"]


def test_an_optimizer_prepared_after_a_sharded_compiled_model_follows_its_shards(run: Launched) -> None:
    """The names taken before sharding are the model's, not the compiled wrapper's (`_orig_mod.` ...)."""
    assert run.of("fsdp_optimizer_follows") == [[True, "OptimizedModule"]] * 2
