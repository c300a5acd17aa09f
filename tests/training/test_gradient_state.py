"""GradientState as scripts written for Accelerate read it: `accel.state.GradientState()` is the
running Accelerator's; active_dataloader / end_of_dataloader follow nested loops."""

from __future__ import annotations

import pickle

import pytest
from torch.utils.data import DataLoader

from accel import Accelerator
from accel.state import GradientState
from accel.utils import GradientAccumulationPlugin


def test_gradient_state_is_the_running_accelerators() -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    state = GradientState()
    assert state is accelerator.gradient_state and state.num_steps == 3
    assert GradientState(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2)) is state
    assert state.num_steps == 2 and state.initialized and state.adjust_scheduler
    later = Accelerator(cpu=True)
    assert GradientState() is later.gradient_state
    GradientState._reset_state()
    fresh = GradientState()
    assert fresh is not later.gradient_state and fresh.num_steps == 1 and GradientState() is fresh
    with pytest.raises(ValueError, match="num_steps=0"):
        GradientState(0)


def test_scripts_can_add_attributes_and_pickling_gives_an_idle_copy() -> None:
    state = Accelerator(cpu=True).gradient_state
    state.my_flag = True  # no __slots__
    copy = pickle.loads(pickle.dumps(state))
    assert copy is not state and copy.my_flag and copy.active_dataloader is None
    assert GradientState() is state  # the copy does not become the current one


def test_active_dataloader_and_end_of_dataloader_follow_nested_loops() -> None:
    """Accelerate's test_dataloader_break, and what the outer loop sees after the inner one."""
    accelerator = Accelerator(cpu=True)
    state = accelerator.gradient_state
    first, second = accelerator.prepare(DataLoader(list(range(4)), batch_size=2), DataLoader(list(range(6)), batch_size=2))
    assert state.active_dataloader is None and state.dataloader_references == [None]
    for index, _ in enumerate(first):
        assert state.active_dataloader is first
        if index == 1:  # the outer loop's last batch
            inner = [(state.active_dataloader is second, state.end_of_dataloader) for _ in second]
            assert inner == [(True, False), (True, False), (True, True)]
        assert state.end_of_dataloader == (index == 1)
        assert state.in_dataloader and state.dataloader_references == [None, first]
    assert state.active_dataloader is None and not state.end_of_dataloader and state.remainder == -1


def test_leaving_a_loop_early_leaves_no_active_dataloader() -> None:
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(DataLoader(list(range(6)), batch_size=2))
    for _ in prepared:
        break
    assert accelerator.gradient_state.active_dataloader is None
    assert "Sync Gradients: True" in repr(accelerator.gradient_state)
