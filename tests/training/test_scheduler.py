"""AcceleratedScheduler: the same learning rate as Accelerate's own AcceleratedScheduler at every step.

Each case drives accel's prepared scheduler and Accelerate's real `accelerate.scheduler.AcceleratedScheduler`
through the same sequence of training steps (micro-batches that sync or not, optimizer steps that were skipped)
and compares the learning rates step by step. Accelerate's wrapper reads the number of processes from its
AcceleratorState singleton, which here answers with the case's count (the process group itself plays no part in
how it steps); the real two-process run is tests/distributed/two_processes/test_scheduler.py.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator

import accelerate.scheduler
import accelerate.state
import pytest
import torch
from accelerate.utils import GradientAccumulationPlugin as AccelerateAccumulationPlugin
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, OneCycleLR, ReduceLROnPlateau, StepLR

from accel import Accelerator
from accel.training.accumulation import GradientAccumulationPlugin
from accel.training.scheduler import AcceleratedScheduler

pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")

Event = tuple[bool, bool]
"""One call of scheduler.step(): (this micro-batch syncs, the optimizer step was skipped)."""
MakeScheduler = Callable[[torch.optim.Optimizer], LRScheduler]

SCHEDULERS: dict[str, MakeScheduler] = {
    "lambda": lambda opt: LambdaLR(opt, lambda step: max(0.0, 1.0 - step / 16)),
    "one_cycle": lambda opt: OneCycleLR(opt, max_lr=1.0, total_steps=12),
    "step": lambda opt: StepLR(opt, step_size=3, gamma=0.5),
}


@pytest.fixture
def accelerate_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """Set how many processes Accelerate's scheduler believes there are; reset its GradientState around the test."""

    def set_count(count: int) -> None:
        monkeypatch.setattr(accelerate.scheduler, "AcceleratorState", lambda: types.SimpleNamespace(num_processes=count))

    accelerate.state.GradientState._reset_state()
    yield set_count
    accelerate.state.GradientState._reset_state()


def _events(accumulation: int, optimizer_steps: int, skipped: frozenset[int] = frozenset()) -> list[Event]:
    """Micro-batches of `optimizer_steps` windows of `accumulation`; the optimizer steps in `skipped` overflowed."""
    return [
        (micro == accumulation - 1, step in skipped and micro == accumulation - 1)
        for step in range(optimizer_steps)
        for micro in range(accumulation)
    ]


def _run_both(
    make: MakeScheduler,
    events: list[Event],
    *,
    processes: int,
    split_batches: bool = False,
    adjust_scheduler: bool = True,
    step_with_optimizer: bool = True,
    metric: float | None = None,
) -> tuple[list[float], list[float]]:
    """The lr after each event: (accel's, Accelerate's)."""
    accelerator = Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2, adjust_scheduler=adjust_scheduler),
        step_scheduler_with_optimizer=step_with_optimizer,
    )
    model = nn.Linear(2, 1)
    ours_inner = torch.optim.SGD(model.parameters(), lr=1.0)
    _, optimizer = accelerator.prepare(model, ours_inner)
    ours = AcceleratedScheduler.for_accelerator(
        make(ours_inner), [optimizer], accelerator.gradient_state, step_with_optimizer=step_with_optimizer,
        num_processes=processes, split_batches=split_batches, per_optimizer_step=False,
    )
    theirs_optimizer = types.SimpleNamespace(step_was_skipped=False)  # all Accelerate's wrapper reads of it
    state = accelerate.state.GradientState(AccelerateAccumulationPlugin(num_steps=2, adjust_scheduler=adjust_scheduler))
    theirs = accelerate.scheduler.AcceleratedScheduler(
        make(torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=1.0)), theirs_optimizer,
        step_with_optimizer=step_with_optimizer, split_batches=split_batches,
    )
    args = () if metric is None else (metric,)
    lrs: tuple[list[float], list[float]] = ([], [])
    for sync, skipped in events:
        accelerator.gradient_state.sync_gradients = sync
        optimizer._is_overflow = skipped
        state._set_sync_gradients(sync)
        theirs_optimizer.step_was_skipped = skipped
        ours.step(*args)
        theirs.step(*args)
        lrs[0].append(ours.optimizer.param_groups[0]["lr"])
        lrs[1].append(theirs.scheduler.optimizer.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@pytest.mark.parametrize("processes", [1, 2, 3])
@pytest.mark.parametrize("split_batches", [False, True])
def test_each_optimizer_step_moves_the_schedule_as_accelerate(
    accelerate_processes: Callable[[int], None], name: str, processes: int, split_batches: bool
) -> None:
    accelerate_processes(processes)
    events = _events(accumulation=1, optimizer_steps=5 if name == "one_cycle" and split_batches else 10)
    ours, theirs = _run_both(SCHEDULERS[name], events, processes=processes, split_batches=split_batches)
    assert ours == theirs
    assert len(set(ours)) > 1  # the schedule moved


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@pytest.mark.parametrize("adjust_scheduler", [True, False])
@pytest.mark.parametrize("processes", [1, 2])
def test_accumulation_and_skipped_steps_as_accelerate(
    accelerate_processes: Callable[[int], None], name: str, adjust_scheduler: bool, processes: int
) -> None:
    accelerate_processes(processes)
    events = _events(accumulation=3, optimizer_steps=6, skipped=frozenset({1, 4}))
    ours, theirs = _run_both(SCHEDULERS[name], events, processes=processes, adjust_scheduler=adjust_scheduler)
    assert ours == theirs


def test_one_cycle_stops_at_total_steps_where_accelerate_does(accelerate_processes: Callable[[int], None]) -> None:
    # 12 total steps, 2 per optimizer step: torch raises past the 6th optimizer step without Accelerate's cap.
    accelerate_processes(2)
    for accumulation in (1, 2):
        events = _events(accumulation=accumulation, optimizer_steps=10)
        ours, theirs = _run_both(SCHEDULERS["one_cycle"], events, processes=2)
        assert ours == theirs
        end = ours[6 * accumulation - 1]
        assert ours[6 * accumulation:] == [end] * (4 * accumulation) and end < ours[0]  # held at the end
    with pytest.raises(ValueError, match="Tried to step"):
        _run_both(SCHEDULERS["one_cycle"], _events(accumulation=1, optimizer_steps=13), processes=2, split_batches=True)


def test_without_step_with_optimizer_every_call_steps_as_accelerate(accelerate_processes: Callable[[int], None]) -> None:
    accelerate_processes(2)
    events = _events(accumulation=2, optimizer_steps=4, skipped=frozenset({1}))
    ours, theirs = _run_both(SCHEDULERS["lambda"], events, processes=2, step_with_optimizer=False)
    assert ours == theirs == [1.0 - n / 16 for n in range(1, 9)]


def test_reduce_on_plateau_gets_the_metric_each_time_as_accelerate(accelerate_processes: Callable[[int], None]) -> None:
    accelerate_processes(2)

    def plateau(optimizer: torch.optim.Optimizer) -> LRScheduler:
        return ReduceLROnPlateau(optimizer, patience=2, factor=0.5)  # type: ignore[return-value]  # steps like one

    ours, theirs = _run_both(plateau, _events(accumulation=1, optimizer_steps=6), processes=2, metric=1.0)
    assert ours == theirs and ours[-1] < 1.0


# ------------------------------------------------------------------ through the Accelerator
def _decaying(accelerator: Accelerator, total: int) -> tuple[nn.Module, torch.optim.Optimizer, AcceleratedScheduler]:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = LambdaLR(optimizer, lambda step: 1.0 - step / total)
    return accelerator.prepare(model, optimizer, scheduler)  # type: ignore[no-any-return]


def test_the_accelerator_builds_accelerates_stepping_by_default() -> None:
    accelerator = Accelerator()
    _, optimizer, scheduler = _decaying(accelerator, 10)
    assert scheduler.steps_per_optimizer_step == 1 and not accelerator.scheduler_per_optimizer_step
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr() == [0.9]


def test_adjust_scheduler_false_is_accepted_and_reaches_the_gradient_state() -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, adjust_scheduler=False)
    assert not Accelerator(gradient_accumulation_plugin=plugin).gradient_state.adjust_scheduler
    assert Accelerator(gradient_accumulation_steps=2).gradient_state.adjust_scheduler


def test_per_optimizer_step_counts_optimizer_steps_only() -> None:
    accelerator = Accelerator(gradient_accumulation_steps=2, scheduler_per_optimizer_step=True)
    assert accelerator.scheduler_per_optimizer_step
    model, optimizer, scheduler = _decaying(accelerator, 10)
    for _ in range(4):
        with accelerator.accumulate(model):
            optimizer.step()
            scheduler.step()
    assert scheduler.get_last_lr() == [0.8] and scheduler.scheduler._step_count == 3  # no count on micro-batches


def test_per_optimizer_step_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_SCHEDULER_PER_OPTIMIZER_STEP", "true")
    assert Accelerator().scheduler_per_optimizer_step
    with pytest.warns(UserWarning, match="scheduler_per_optimizer_step=False given in the code overrides"):
        assert not Accelerator(scheduler_per_optimizer_step=False).scheduler_per_optimizer_step


def test_per_optimizer_step_is_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="scheduler_per_optimizer_step"):
        Accelerator(scheduler_per_optimizer_step="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="step_scheduler_with_optimizer=False"):
        Accelerator(scheduler_per_optimizer_step=True, step_scheduler_with_optimizer=False)
