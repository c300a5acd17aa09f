"""DDP communication hooks from DistributedDataParallelKwargs(comm_hook=...), with 2 real processes (one launch)."""

from __future__ import annotations

import pytest

from accel import DDPCommunicationHookType, DistributedDataParallelKwargs
from launching import Launched, launch


@pytest.fixture(scope="module")
def run() -> Launched:
    result = launch("comm_hook_script.py")
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_without_a_hook_the_update_is_the_float32_average(run: Launched) -> None:
    assert run.of("none hook") == ["", ""]
    assert all(error < 1e-5 for errors in run.of("none errors") for error in errors)  # float32 rounding only


def test_the_fp16_hook_averages_in_half_precision(run: Launched) -> None:
    assert run.of("fp16 hook") == ["fp16_compress_hook"] * 2
    errors = [error for errors in run.of("fp16 errors") for error in errors]
    assert all(0 < error < 2e-3 for error in errors), errors  # rounded to float16: close, never exact
    assert run.of("fp16 same weights") == [True, True]


def test_power_sgd_runs_with_its_options_and_wrapper_and_keeps_the_processes_in_step(run: Launched) -> None:
    hooks = run.of("power_sgd hook")
    assert hooks[0] == hooks[1] and "fp16_compress_wrapper" in hooks[0]
    errors = run.of("power_sgd errors")[0]
    assert all(error < 2e-3 for error in errors[:2])  # before start_powerSGD_iter=2: the full gradient, in fp16
    assert all(error > 0.1 for error in errors[2:])  # then rank 1 (matrix_approximation_rank) of a rank-16 gradient
    assert run.of("power_sgd same weights") == [True, True]


def test_a_bf16_hook_on_gloo_is_refused_when_the_accelerator_is_built(run: Launched) -> None:
    messages = run.of("bf16 refused")
    assert messages[0] == messages[1]
    assert messages[0].startswith("DistributedDataParallelKwargs(comm_hook=BF16): torch's bf16 hooks need the nccl")
    assert "uses 'gloo'" in messages[0] and "Use DDPCommunicationHookType.FP16 here" in messages[0]


@pytest.mark.parametrize(("options", "expected"), [
    ({"comm_hook": "int8"}, r"comm_hook='int8' is not accepted; accepted values: DDPCommunicationHookType.NO"),
    ({"comm_wrapper": DDPCommunicationHookType.FP16}, r"comm_wrapper=FP16\) compresses what a PowerSGD hook sends"),
    ({"comm_hook": "fp16", "comm_state_option": {"matrix_approximation_rank": 2}}, r"configures PowerSGD, and comm_hook is FP16"),
    ({"comm_hook": "power_sgd", "comm_state_option": {"rank": 2}}, r"unknown keys \['rank'\]; PowerSGDState takes"),
])
def test_bad_hook_options_are_refused_when_built(options: dict[str, object], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        DistributedDataParallelKwargs(**options)  # type: ignore[arg-type]
