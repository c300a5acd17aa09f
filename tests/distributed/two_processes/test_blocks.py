"""Activation checkpointing and regional compilation with 2 real processes (blocks_script.py).

DDP: checkpointing each block gives the gradients and weights of the run that keeps its activations,
bit for bit, and keeps fewer bytes; with regional compilation too the result is one process's eager
run on the global batch (within 1e-5). FSDP2: each block sharded, checkpointed
(fsdp_activation_checkpointing, the same code) and compiled in place keeps its per-block all-gathers
(FSDP2's hooks fire for every block) and trains as one process does; with fsdp_activation_checkpointing_offload
the blocks' saved inputs leave the device's keeping and it still trains as one process does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: tiny_transformer

from launching import Launched, launch  # noqa: E402
from tiny_transformer import make_transformer, train  # noqa: E402

from accel import Accelerator  # noqa: E402


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """One process, eager, the global batch."""
    return train(Accelerator(cpu=True), make_transformer())


@pytest.fixture(scope="module")
def ddp() -> Launched:
    result = launch("blocks_script.py", "ddp", timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def fsdp() -> Launched:
    result = launch("blocks_script.py", "fsdp", timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _close(got: dict[str, list], expected: dict[str, list], tolerance: float) -> None:
    assert got.keys() == expected.keys()
    for name in got:
        torch.testing.assert_close(torch.tensor(got[name]), torch.tensor(expected[name]), rtol=tolerance, atol=tolerance)


def _mean_losses_close(runs: list[dict[str, Any]], expected: list[float]) -> None:
    """Each process's loss is its half batch's mean: their mean is the global batch's (equal halves)."""
    means = [sum(losses) / len(losses) for losses in zip(*(run["losses"] for run in runs))]
    torch.testing.assert_close(means, expected, rtol=1e-5, atol=0)


def test_ddp_checkpointing_gives_the_same_gradients_and_keeps_fewer_bytes(ddp: Launched) -> None:
    for plain, checkpointed in zip(ddp.of("ddp"), ddp.of("ddp_checkpointed")):
        assert checkpointed["gradients"] == plain["gradients"]  # bit for bit, on each process
        assert checkpointed["weights"] == plain["weights"]
        assert checkpointed["saved_bytes"] < plain["saved_bytes"] / 5


def test_ddp_checkpointed_and_regionally_compiled_trains_as_one_eager_process(ddp: Launched, reference) -> None:
    assert ddp.of("ddp_regional_compiled") == [[True] * 4] * 2
    assert ddp.of("ddp_compiled") == [[False] * 4] * 2
    runs = ddp.of("ddp_regional")
    _mean_losses_close(runs, reference["losses"])
    for run in runs:
        _close(run["gradients"], reference["gradients"], 1e-5)  # DDP's averaged gradients
        _close(run["weights"], reference["weights"], 1e-5)
        assert run["saved_bytes"] < reference["saved_bytes"] / 2 / 5  # half the batch each, then checkpointed


def test_fsdp2_keeps_its_per_block_all_gathers_under_regional_compilation(fsdp: Launched) -> None:
    assert fsdp.of("fsdp_regional_compiled") == [[True] * 4] * 2
    assert fsdp.of("fsdp_sharded") == [["DTensor"] * 4] * 2
    for counts in fsdp.of("fsdp_unshards"):
        # 3 steps, each block gathered for its forward and again for its backward (the recompute reuses it)
        assert all(count >= 6 for count in counts), counts


def test_fsdp2_checkpointed_and_regionally_compiled_trains_as_one_eager_process(fsdp: Launched, reference) -> None:
    weights = fsdp.of("fsdp_regional")[0]["weights"]  # the main process has the gathered weights
    _close(weights, reference["weights"], 1e-5)
    runs = fsdp.of("fsdp_regional")
    _mean_losses_close(runs, reference["losses"])
    assert all(run["saved_bytes"] < reference["saved_bytes"] / 2 / 5 for run in runs)


def test_fsdp2_offloading_the_saved_inputs_trains_as_one_process_and_keeps_them_off_the_device(
        fsdp: Launched, reference) -> None:
    runs = fsdp.of("fsdp_offloaded")
    _close(runs[0]["weights"], reference["weights"], 1e-5)
    _mean_losses_close(runs, reference["losses"])
    for offloaded, checkpointed in zip(runs, fsdp.of("fsdp_regional")):
        # what autograd keeps outside the blocks' checkpoints: each block's input moved to the host's keeping
        assert offloaded["saved_bytes"] < checkpointed["saved_bytes"], (offloaded["saved_bytes"], checkpointed["saved_bytes"])
