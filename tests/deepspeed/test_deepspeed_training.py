"""DeepSpeed training with 2 real processes (gloo, CPU): ZeRO 1, 2 and 3 (with CPU offload too) train like the
one-process run on the same global batch, each process on its own rows (as under DDP), with half the optimizer
state per process; clipping happens only where asked, at the asked norm."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from ds_tiny import reference
from launching import Launched, launch
from torch import nn

pytest.importorskip("deepspeed")

SCRIPT = str(Path(__file__).parent / "ds_train_script.py")
CASES = ("zero1", "zero2", "zero3", "zero2_offload", "zero3_offload")
LOSS_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""fp32: the two processes' halves are reduced in another order than one process sums them (measured: < 6e-8)."""
WEIGHT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""Measured: < 3e-8 (weights gathered from both partitions under ZeRO 3)."""
LONG_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
"""60 steps: the reduction-order differences above compound."""


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch(SCRIPT, *CASES, "zero2_clip", "zero2_bf16", "zero2_accumulate", timeout=540)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def close(actual: object, expected: object, tolerance: dict[str, float]) -> None:
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), **tolerance)


@pytest.mark.parametrize("case", CASES)
def test_every_zero_stage_trains_like_one_process_on_the_global_batch(run: Launched, case: str) -> None:
    expected = reference(epochs=2)
    for losses in run.of(f"{case}_losses"):
        close(losses, expected["losses"], LOSS_TOLERANCE)
    weights = run.results[0][f"{case}_weights"]  # gathered on process 0 (under ZeRO 3 from both partitions)
    assert weights.keys() == expected["weights"].keys()
    for name, values in expected["weights"].items():
        close(weights[name], values, WEIGHT_TOLERANCE)


@pytest.mark.parametrize("case", CASES)
def test_each_process_trains_on_its_own_rows_as_under_ddp(run: Launched, case: str) -> None:
    first, second = run.of(f"{case}_rows")
    assert first == [0, 1, 2, 3, 8, 9, 10, 11] * 2 and second == [4, 5, 6, 7, 12, 13, 14, 15] * 2


@pytest.mark.parametrize("case", CASES)
def test_each_process_holds_half_the_optimizer_state(run: Launched, case: str) -> None:
    from ds_tiny import make_model

    whole = 2 * sum(p.numel() * 4 for p in make_model().parameters())  # AdamW's exp_avg and exp_avg_sq, fp32
    for held in run.of(f"{case}_bytes"):
        assert whole / 2 <= held <= whole / 2 + 64  # DeepSpeed pads each partition to an alignment


def test_the_prepared_model_is_the_engine_and_unwraps_to_the_script_model(run: Launched) -> None:
    assert run.of("zero2_type") == [["DEEPSPEED", "no", "DeepSpeedEngine", "torch.float32"]] * 2
    assert run.of("zero3_unwrapped") == ["Sequential"] * 2


def test_gradient_clipping_applies_at_the_asked_norm_and_reports_the_norm(run: Launched) -> None:
    expected = reference(epochs=2, clip=0.05)
    for losses in run.of("zero2_clip_losses"):
        close(losses, expected["losses"], LOSS_TOLERANCE)
    assert expected["losses"] != reference(epochs=2)["losses"]  # the clip mattered
    assert all(norm > 0.05 for norm in run.of("zero2_clip_norm"))


def test_accumulation_steps_the_engine_once_per_two_micro_batches_like_one_process_on_both(run: Launched) -> None:
    expected = reference(epochs=2, world=4)  # one step on every row of both micro-batches of both processes
    weights = run.results[0]["zero2_accumulate_weights"]
    for name, values in expected["weights"].items():
        close(weights[name], values, WEIGHT_TOLERANCE)


def test_bf16_runs_deepspeed_bf16_weights_and_reports_it(run: Launched) -> None:
    assert run.of("zero2_bf16_type") == [["DEEPSPEED", "bf16", "DeepSpeedEngine", "torch.bfloat16"]] * 2
    close(run.of("zero2_bf16_losses")[0], reference(epochs=2)["losses"], {"rtol": 0.05, "atol": 0.02})


def test_an_accelerate_deepspeed_config_runs_deepspeed_from_a_script_without_a_plugin(tmp_path: Path) -> None:
    """`accel launch --config_file` with Accelerate's distributed_type: DEEPSPEED (ZeRO 3): the script's plain
    Accelerator() trains through DeepSpeed at that stage (not DDP), each process on its own rows."""
    import yaml

    config = tmp_path / "accelerate.yaml"
    config.write_text(yaml.safe_dump({
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_processes": 2, "use_cpu": True,
        "mixed_precision": "no", "deepspeed_config": {"zero_stage": 3, "gradient_accumulation_steps": 1,
                                                      "deepspeed_multinode_launcher": "standard"},
    }))
    launcher = [sys.executable, "-m", "accel", "launch", "--config_file", str(config)]
    run = launch(SCRIPT, "launched", launcher=launcher, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.of("launched_stage") == [3, 3]
    assert run.of("launched_type")[0][:3] == ["DEEPSPEED", "no", "DeepSpeedEngine"]
    for losses in run.of("launched_losses"):
        close(losses, reference(epochs=2)["losses"], LOSS_TOLERANCE)
    assert sorted(sum(run.of("launched_rows"), [])) == sorted(list(range(16)) * 2)


def test_zero3_on_the_cpu_gathers_the_same_weights_every_time_and_trains_like_one_process() -> None:
    """DeepSpeed's coalesced gathers read unfinished gloo all-gathers: without accel's sequential gathers on the
    CPU, 84 of these 100 gathers differed from the first (docs/deepspeed.md)."""
    from ds_gloo_script import LR, STEPS, batch, make_model

    run = launch(str(Path(__file__).parent / "ds_gloo_script.py"), timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.results[0]["differing_gathers"] == 0
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    expected = []
    for step in range(STEPS):  # one process on both processes' rows
        x, y = (torch.cat(parts) for parts in zip(batch(step, 0), batch(step, 1)))
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(loss.item())
    for losses in run.of("losses"):
        close(losses, expected, LONG_TOLERANCE)
    for name, value in model.state_dict().items():
        close(run.results[0]["weights"][name], value.tolist(), LONG_TOLERANCE)
