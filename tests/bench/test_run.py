"""accel.bench.run: the cases of one mode train interleaved, one step of each per round in a rotating
order, and each still computes what it computes trained alone."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accel.bench import run
from accel.bench.cases import Case, select_cases
from accel.bench.run import run_case, run_cases
from accel.bench.workload import Workload


class Recorded(nn.Module):
    """A linear layer that notes which copy ran each forward (the list is the class's: copies share it; it holds
    the copies themselves, as an id can be reused once a copy is freed)."""

    calls: ClassVar[list[nn.Module]] = []

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        Recorded.calls.append(self)
        return self.linear(inputs)


def _workload(steps: int) -> Workload:
    Recorded.calls.clear()
    torch.manual_seed(0)
    batches = [(torch.randn(4, 8), torch.randint(0, 4, (4,))) for _ in range(steps)]
    return Workload("recorded", Recorded(), batches, lambda out, target: F.cross_entropy(out.float(), target), 4)


def test_cases_take_turns_one_step_each_in_a_rotating_order_after_their_warm_up() -> None:
    work = _workload(steps=4)
    Recorded.calls.clear()
    rows = run_cases(work, _eager("fp32", "bf16-true", "fp8-te"), 1, 1e-2, lambda: None)
    assert [(row.case, row.status) for row in rows] == [("fp32", "ran"), ("bf16-true", "ran"), ("fp8-te", "skipped")]
    first, second = Recorded.calls[0], Recorded.calls[1]
    assert first is not second
    # warm-up step of each in turn, then rounds of one step each: (a, b), (b, a), (a, b)
    order = ["a" if call is first else "b" for call in Recorded.calls]
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]
    for row in rows[:2]:
        assert len(row.losses) == 4 and row.step_ms is not None and row.step_ms > 0
        assert row.bytes_per_param is not None and row.bytes_per_param > 0
        assert len(row.speedups) == 3  # the steps after the warm-up, each against fp32's step of the same round
    assert rows[0].speedups == [1.0, 1.0, 1.0]
    assert "cannot run here" in rows[2].note


def test_each_case_computes_what_it_computes_trained_alone() -> None:
    work = _workload(steps=5)
    together = run_cases(work, _eager("fp32", "bf16-true"), 2, 1e-2, lambda: None)
    alone = [run_case(work, case, "eager", 2, 1e-2, lambda: None) for case in select_cases(["fp32", "bf16-true"])]
    for mixed, single in zip(together, alone):
        assert mixed.losses == single.losses and mixed.ran == single.ran
    assert together[0].losses != together[1].losses  # bf16 weights: a different run, not a copy of fp32's


def test_every_step_advances_the_progress_once() -> None:
    work = _workload(steps=3)
    ticks: list[None] = []
    run_cases(work, _eager("fp32", "bf16-true"), 0, 1e-2, lambda: ticks.append(None))
    assert len(ticks) == 2 * 3


def test_without_room_for_every_case_they_train_in_groups_each_timed_against_its_own_fp32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A device too small for all the copies at once: groups of fp32 and one other, the same numbers."""
    work = _workload(steps=4)
    jobs = _eager("fp32", "bf16-true", "16-true")
    together = run_cases(work, jobs, 1, 1e-2, lambda: None)
    monkeypatch.setattr(run, "_room", lambda reference: False)
    Recorded.calls.clear()
    ticks: list[None] = []
    grouped = run_cases(work, jobs, 1, 1e-2, lambda: ticks.append(None))
    assert [row.case for row in grouped] == [case.name for case, _ in jobs]
    assert [row.losses for row in grouped] == [row.losses for row in together]
    assert all(len(row.speedups) == 3 for row in grouped)
    assert len({id(call) for call in Recorded.calls}) == 4  # fp32 trained twice, once beside each of the others
    Recorded.calls.clear()
    assert len(ticks) == 3 * 4  # the second fp32 copy's steps are not counted again


def _eager(*names: str) -> list[tuple[Case, str]]:
    return [(case, "eager") for case in select_cases(list(names))]


def test_the_cpu_share_is_measured_with_several_threads_only() -> None:
    work = _workload(steps=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = run_cases(work, _eager("fp32"), 1, 1e-2, lambda: None)[0]
        torch.set_num_threads(1)
        one = run_cases(work, _eager("fp32"), 1, 1e-2, lambda: None)[0]
    finally:
        torch.set_num_threads(threads)
    assert two.cpu_share is not None and two.cpu_share > 0
    assert one.cpu_share is None  # one thread: sharing the CPU slows every row alike, nothing to judge
