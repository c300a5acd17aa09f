"""`activation_checkpointing_policy` (keyword, config key, flag, ACCEL_ACTIVATION_CHECKPOINTING_POLICY): selective
checkpointing (torchtitan's per-op policy) and a memory budget. Both give the losses, gradients and weights of
full checkpointing (and of none) exactly, and keep for backward less than no checkpointing and more than full
checkpointing: what the forward saves outside the checkpointed blocks plus what selective checkpointing caches
inside them (its kept op outputs, which torch stores apart from autograd's saved tensors)."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from tiny_transformer import make_transformer, train

import accel.training.blocks as blocks_module
from accel import Accelerator
from accel.settings import ACTIVATION_CHECKPOINTING_POLICY
from accel.training.blocks import is_checkpointed
from accel.training.selective import selective_context


class _Cache(dict):  # type: ignore[type-arg]
    """One op's entries in selective checkpointing's cache (torch's storage: op -> {call index: outputs}), adding
    up the bytes of the outputs the forward keeps there."""

    def __init__(self, added: list[int]) -> None:
        super().__init__()
        self.added = added

    def __setitem__(self, index: Any, outputs: Any) -> None:
        for leaf in torch.utils._pytree.tree_leaves(outputs):
            tensor = getattr(leaf, "val", leaf)  # kept outputs come wrapped (torch's _VersionWrapper)
            if isinstance(tensor, torch.Tensor):
                self.added[0] += tensor.untyped_storage().nbytes()
        super().__setitem__(index, outputs)


def _run(monkeypatch: pytest.MonkeyPatch, **options: object) -> dict[str, Any]:
    """Three SGD steps of the tiny transformer; `kept`: the bytes the first forward keeps for backward."""
    cached: list[list[int]] = []

    def recording_context() -> tuple[Any, Any]:
        forward, recompute = selective_context()
        added = [0]
        cached.append(added)
        forward.storage = recompute.storage = collections.defaultdict(lambda: _Cache(added))
        return forward, recompute

    monkeypatch.setattr(blocks_module, "selective_context", recording_context)
    result = train(Accelerator(cpu=True, **options), make_transformer(width=64))  # type: ignore[arg-type]
    first_forward = cached[:len(result["model"].blocks)]  # one context per block and forward
    return {**result, "kept": result["saved_bytes"] + sum(added[0] for added in first_forward)}


def test_selective_checkpointing_trains_as_full_and_keeps_between_none_and_full(monkeypatch: pytest.MonkeyPatch) -> None:
    none = _run(monkeypatch)
    full = _run(monkeypatch, activation_checkpointing=True)
    selective = _run(monkeypatch, activation_checkpointing=True, activation_checkpointing_policy="selective")
    for run in (full, selective):
        assert run["losses"] == none["losses"] and run["gradients"] == none["gradients"]
        assert run["weights"] == none["weights"]
    assert full["kept"] < selective["kept"] < 0.75 * none["kept"]
    assert all(is_checkpointed(block) for block in selective["model"].blocks)


def test_a_memory_budget_checkpoints_that_fraction_of_blocks_fewer(monkeypatch: pytest.MonkeyPatch) -> None:
    none = _run(monkeypatch)
    half = _run(monkeypatch, activation_checkpointing=True, activation_checkpointing_policy=0.5)
    full = _run(monkeypatch, activation_checkpointing=True, activation_checkpointing_policy=0.0)
    assert [is_checkpointed(block) for block in half["model"].blocks] == [False, True, False, True]
    assert half["losses"] == none["losses"] and half["gradients"] == none["gradients"]
    assert full["kept"] < half["kept"] < none["kept"]


@pytest.mark.parametrize(("value", "words"), [
    ("partial", "full, selective, or a memory budget from 0 to 1"),
    (1.5, "full, selective, or a memory budget from 0 to 1"),
    (True, "full, selective, or a memory budget"),
])
def test_bad_policies_are_refused_naming_what_is_accepted(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Accelerator(cpu=True, activation_checkpointing=True, activation_checkpointing_policy=value)  # type: ignore[arg-type]


def test_a_policy_without_checkpointing_is_refused_as_it_would_change_nothing() -> None:
    with pytest.raises(ValueError, match="activation_checkpointing is off, so it would change nothing"):
        Accelerator(cpu=True, activation_checkpointing_policy="selective")


def test_a_budget_beside_fsdps_own_checkpointing_is_refused_as_fsdp_would_undo_it() -> None:
    from accel.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(activation_checkpointing=True, auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["Block"])
    with pytest.raises(ValueError, match="fsdp_activation_checkpointing\\) checkpoints every unit, which would undo it"):
        Accelerator(cpu=True, fsdp_plugin=plugin, activation_checkpointing=True, activation_checkpointing_policy=0.5)
    selective = Accelerator(cpu=True, fsdp_plugin=plugin, activation_checkpointing=True,
                            activation_checkpointing_policy="selective")  # the blocks are checkpointed before FSDP's turn
    assert selective.activation_checkpointing_policy == "selective"


def test_the_policy_comes_from_its_variable_and_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_ACTIVATION_CHECKPOINTING_POLICY", "0.25")
    monkeypatch.setenv("ACCEL_ACTIVATION_CHECKPOINTING", "true")
    assert Accelerator(cpu=True).activation_checkpointing_policy == 0.25
    assert ACTIVATION_CHECKPOINTING_POLICY.kind.from_text("selective", "x") == "selective"
