"""Models built on the meta device in one process: found, and given memory by prepare."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel import Accelerator
from accel.fsdp.meta_loading import loading_mode
from accel.training.meta_init import build_on_meta, materialize, meta_state


class Scaled(nn.Module):
    """A module with a parameter and no reset_parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))


def test_meta_state_names_real_meta_and_mixed_models() -> None:
    assert meta_state(nn.Linear(2, 2)) == "real"
    assert meta_state(nn.Linear(2, 2, device="meta")) == "meta"
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, device="meta"))
    assert meta_state(mixed) == "mixed"
    with pytest.raises(ValueError, match="some parameters on the meta device and some not"):
        loading_mode(mixed, False, Accelerator(cpu=True).process_state)


def test_empty_init_builds_parameters_on_meta_and_keeps_buffers_and_ties() -> None:
    accelerator = Accelerator(cpu=True)
    with accelerator.init_module(empty_init=True):
        model = nn.Sequential(nn.Embedding(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 5, bias=False))
        model[2].weight = model[0].weight
    assert all(p.is_meta for p in model.parameters())
    assert not model[1].running_var.is_meta and torch.equal(model[1].running_var, torch.ones(4))
    assert model[2].weight is model[0].weight


def test_prepare_gives_an_empty_model_memory_and_reset_parameters_in_one_process() -> None:
    accelerator = Accelerator(cpu=True)
    with accelerator.init_module(empty_init=True):
        model = nn.Linear(3, 2)
    torch.manual_seed(0)
    expected = nn.Linear(3, 2).state_dict()
    torch.manual_seed(0)
    model = accelerator.prepare(model)
    assert meta_state(model) == "real"
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name])


def test_modules_without_reset_parameters_start_at_zero_with_a_warning() -> None:
    with build_on_meta(False):
        model = Scaled()
    with pytest.warns(UserWarning, match="Scaled"):
        materialize(model, torch.device("cpu"))
    assert torch.equal(model.scale.detach(), torch.zeros(3))


def test_empty_init_must_be_a_bool_or_none() -> None:
    with pytest.raises((TypeError, ValueError), match="empty_init"):
        Accelerator(cpu=True).init_module(empty_init="yes")  # type: ignore[arg-type]


def test_transformers_flags_are_set_only_inside_the_block_of_a_receiving_process(monkeypatch) -> None:
    import os

    monkeypatch.delenv("FSDP_CPU_RAM_EFFICIENT_LOADING", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    with build_on_meta(True):
        assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == os.environ["ACCELERATE_USE_FSDP"] == "true"
    assert "FSDP_CPU_RAM_EFFICIENT_LOADING" not in os.environ and "ACCELERATE_USE_FSDP" not in os.environ


@pytest.mark.parametrize(("states", "rank0_loading", "expected"), [
    (["meta", "real"], True, "process 0's model is on the meta device"),
    (["real", "meta"], False, "on process\\(es\\) \\[1\\] only"),
])
def test_a_meta_model_that_nothing_would_fill_is_refused(monkeypatch, states, rank0_loading, expected) -> None:
    """What each process holds is gathered (a collective); here the gathered answers stand in for two processes."""
    from accel.fsdp import meta_loading

    monkeypatch.setattr(meta_loading.operations, "gather_objects", lambda value, state: states)
    with pytest.raises(ValueError, match=expected):
        loading_mode(nn.Linear(2, 2), rank0_loading, Accelerator(cpu=True).process_state)


@pytest.mark.parametrize(("states", "rank0_loading", "expected"), [
    (["real", "meta"], True, "rank0"), (["real", "real"], True, "rank0"), (["meta", "meta"], False, "empty"),
    (["meta", "meta"], True, "empty"), (["real", "real"], False, None),
])
def test_loading_modes(monkeypatch, states, rank0_loading, expected) -> None:
    from accel.fsdp import meta_loading

    monkeypatch.setattr(meta_loading.operations, "gather_objects", lambda value, state: states)
    assert loading_mode(nn.Linear(2, 2), rank0_loading, Accelerator(cpu=True).process_state) == expected


def test_init_empty_weights_keeps_the_attributes_libraries_set_on_a_parameter() -> None:
    """transformers marks parameters (`_is_hf_initialized`) before registering them; a plain Parameter's
    constructor takes no such keyword, so the attributes are carried over after the move."""
    from accel import init_empty_weights

    class Marked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            weight = nn.Parameter(torch.ones(2), requires_grad=False)
            weight._is_hf_initialized = True
            self.weight = weight

    with init_empty_weights():
        module = Marked()
    assert module.weight.is_meta and module.weight._is_hf_initialized and not module.weight.requires_grad
