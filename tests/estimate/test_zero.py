"""The DeepSpeed ZeRO estimate equals what real runs hold: on 1, 2 and 4 processes (gloo, CPU), ZeRO 1, 2 and 3 under
fp32, bf16 and fp16, with optimizer (and ZeRO 3 parameter) offload, AdamW: each rank's parameters, gradients, optimizer
state and buffers, on its device and on the host, byte for byte, at the optimizer step and after it; no storage the
process holds is missed (the live check); and a Llama-3-8B on 64 ranks under ZeRO 3 is ZeRO's paper accounting."""

from __future__ import annotations

import doctest

import pytest
import torch
from launching import Launched, launch
from zero_script import CASES

import accel.estimate.zero
from accel.estimate.models import build_on_meta
from accel.estimate.zero import zero_bytes

LIVE = ("1-no", "2-bf16", "3-fp16", "2-no-offload", "3-bf16-offload")
"""Cases whose every live storage is compared too, on 2 processes (a scan of the process's objects: ~1 s a case)."""


@pytest.fixture(scope="module")
def runs() -> dict[int, Launched]:
    """The launches made so far, by process count: one each, every case in it (each its own Accelerator and engine)."""
    return {}


def launched(runs: dict[int, Launched], processes: int) -> Launched:
    if processes not in runs:
        cases = [f"live:{name}" if processes == 2 and name in LIVE else name for name in CASES]
        runs[processes] = launch("../../estimate/zero_script.py", *cases, processes=processes, timeout=300)
    assert runs[processes].returncode == 0, runs[processes].stderr[-4000:]
    return runs[processes]


@pytest.mark.parametrize("processes", [1, 2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_each_rank_holds_what_was_estimated(runs: dict[int, Launched], processes: int, case: str) -> None:
    """[device (rank, parameters, gradients, optimizer, buffers), host (...), other] at the step and after it."""
    results = launched(runs, processes).of(case)
    assert len(results) == processes
    for result in results:
        assert result["held"] == result["estimate"]
        assert result["held"][0][2] == 0  # nothing the ZeRO optimizer holds is left out of the accounting


def test_no_storage_the_process_holds_is_missed(runs: dict[int, Launched]) -> None:
    """Every storage new since the case began, less the input and DeepSpeed's bookkeeping scalars, is counted."""
    for case in LIVE:
        for result in launched(runs, 2).of(case):
            device, host, other = result["held"][0]
            assert result["live"] == sum(device[1:]) + sum(host[1:]) + other


def test_partitions_straddle_and_pad_as_deepspeed_cuts_them(runs: dict[int, Launched]) -> None:
    """ZeRO 1 on 4 ranks, fp32: 119 trainable elements in a flat group of 120 (2N = 8 aligns it), 30 a rank. Each rank
    holds at the step the whole of every parameter overlapping its 30: ranks 0 and 1 the embedding (66), rank 2 the
    embedding, 15 and 3 (102), rank 3 the 18 it starts inside, 6 and 11, and one zero padding to 120 (36)."""
    results = launched(runs, 4).of("1-no")
    assert [result["held"][0][0][2] for result in results] == [66 * 4, 66 * 4, 102 * 4, 36 * 4]
    assert all(result["held"][1][0][2] == 0 for result in results)  # the step frees them


def test_llama3_8b_on_64_ranks_is_zero_papers_accounting() -> None:
    """ZeRO 3, bf16, AdamW: 2 + 2 + 12 bytes a parameter over N = 64 (every Llama-3-8B parameter divides by 64: no
    padding), plus what DeepSpeed keeps besides: the 65 RMSNorm weights (4096 elements, under the 1e5 persistence
    threshold) gathered on every rank, the IPG bucket (5e8 bf16 elements), and AdamW's one `step` on the host."""
    hidden, kv, inter, vocab, layers = 4096, 1024, 14336, 128256, 32
    psi = 2 * vocab * hidden + layers * (2 * hidden * hidden + 2 * kv * hidden + 3 * inter * hidden + 2 * hidden) + hidden
    assert psi == 8_030_261_248
    ranks = zero_bytes(build_on_meta("llama3-8b"), "bf16", stage=3, processes=64)
    norms = (2 * layers + 1) * hidden * 2
    for rank in (ranks[0], ranks[63]):
        assert rank.device.parameters == 2 * psi // 64 + norms
        assert rank.device.gradients == 2 * psi // 64
        assert rank.device.optimizer == 12 * psi // 64
        assert rank.device.buffers == 500_000_000 * 2
        assert (rank.host.total, rank.host.optimizer) == (4, 4)
        assert rank.device.total == 16 * psi // 64 + norms + 10**9  # 2,007,565,312 + 532,480 + 1e9 bytes


def test_offloading_moves_the_optimizer_and_partitions_to_the_host() -> None:
    model = build_on_meta("llama3-8b")
    [kept] = zero_bytes(model, "bf16", 3, 64)[:1]
    [moved] = zero_bytes(model, "bf16", 3, 64, offload_optimizer=True, offload_param=True)[:1]
    assert moved.device.optimizer == moved.device.gradients == 0
    assert moved.host.optimizer == kept.device.optimizer + kept.host.optimizer
    assert moved.host.gradients == kept.device.gradients * 3  # the bf16 partition and its fp32 copy
    assert moved.device.parameters == (2 * 32 + 1) * 4096 * 2  # only the gathered persistent norms stay


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"precision": "bf16-true"}, "precision='bf16-true' .*float32 masters.*accepted: no, bf16, fp16"),
    ({"precision": "fp8"}, "precision='fp8'"), ({"stage": 0}, "stage=0 .*accepted: 1, 2, 3"),
    ({"stage": 4}, "stage=4"), ({"optimizer": "lion"}, "optimizer='lion'"), ({"processes": 0}, "processes=0"),
    ({"offload_param": True, "stage": 2}, "offload_param=True with stage=2"), ({"phase": "backward"}, "phase='backward'"),
])
def test_bad_input_names_the_argument(kwargs: dict[str, object], named: str) -> None:
    arguments: dict[str, object] = {"precision": "bf16", "stage": 3, "processes": 2, **kwargs}
    with pytest.raises(ValueError, match=named):
        zero_bytes(torch.nn.Linear(2, 2), **arguments)  # type: ignore[arg-type]


def test_docstring_example() -> None:
    result = doctest.testmod(accel.estimate.zero)
    assert result.failed == 0 and result.attempted >= 2
