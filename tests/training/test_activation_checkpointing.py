"""Activation checkpointing without FSDP: `Accelerator(activation_checkpointing=...)` (config key, flag and
ACCEL_ACTIVATION_CHECKPOINTING) recomputes each block in backward. Gradients are bit-identical to the
run that keeps its activations (dropout included: the recompute draws the same), the forward keeps
fewer bytes for backward, and the blocks are found as FSDP finds them (class names, `_no_split_modules`,
else the repeated blocks of an nn.ModuleList). The two-process run is in
tests/distributed/two_processes/test_blocks.py."""

from __future__ import annotations

import pytest
import torch
from tiny_transformer import Block, make_transformer, saved_bytes, train
from torch import nn

from accel import Accelerator
from accel.settings import ACTIVATION_CHECKPOINTING
from accel.training.blocks import checkpoint_blocks, find_blocks, is_checkpointed


def _run(**options: object) -> dict[str, object]:
    return train(Accelerator(cpu=True, **options), make_transformer(dropout=0.1))  # type: ignore[arg-type]


@pytest.mark.parametrize("blocks", [True, ["Block"], "Block"])
def test_gradients_are_the_uncheckpointed_runs_and_the_forward_keeps_fewer_bytes(blocks: object) -> None:
    plain = _run()
    checkpointed = _run(activation_checkpointing=blocks)
    assert checkpointed["gradients"] == plain["gradients"]  # exact: the same arithmetic, dropout's draws included
    assert checkpointed["weights"] == plain["weights"]
    assert checkpointed["losses"] == plain["losses"]
    # each block keeps only its input (and RNG state); embedding, final norm and head keep theirs: 65,924
    # bytes against 552,324 here
    assert checkpointed["saved_bytes"] < plain["saved_bytes"] / 5  # type: ignore[operator]
    model = checkpointed["model"]
    assert all(is_checkpointed(block) for block in model.blocks)  # type: ignore[union-attr]
    assert not is_checkpointed(model.head)  # type: ignore[union-attr]


def test_the_blocks_recompute_their_forward_in_backward() -> None:
    model = make_transformer()
    calls: list[int] = []
    model.blocks[2].up.register_forward_hook(lambda *_: calls.append(1))
    Accelerator(cpu=True, activation_checkpointing=True).prepare(model)
    model(torch.zeros(2, 5, dtype=torch.long)).sum().backward()
    assert len(calls) == 2


def test_the_environment_and_its_spellings_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_ACTIVATION_CHECKPOINTING", "Block")
    assert Accelerator(cpu=True).activation_checkpointing == ("Block",)
    monkeypatch.setenv("ACCEL_ACTIVATION_CHECKPOINTING", "true")
    assert Accelerator(cpu=True).activation_checkpointing is True
    assert ACTIVATION_CHECKPOINTING.flags == ("--activation_checkpointing", "--activation-checkpointing")
    assert ACTIVATION_CHECKPOINTING.parse("no", "flag") is False
    assert ACTIVATION_CHECKPOINTING.format(("Block", "Layer")) == "Block,Layer"
    with pytest.warns(UserWarning, match="activation_checkpointing=False given in the code overrides"):
        assert Accelerator(cpu=True, activation_checkpointing=False).activation_checkpointing is False


@pytest.mark.parametrize(("value", "message"), [
    (3, "activation_checkpointing=3 is not accepted; accepted: true .*, false, or class names"),
    ([""], "activation_checkpointing=\\[''\\] is not accepted"),
])
def test_bad_values_raise_at_construction(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Accelerator(cpu=True, activation_checkpointing=value)  # type: ignore[arg-type]


def test_a_class_that_is_not_in_the_model_raises_at_prepare_naming_its_classes() -> None:
    accelerator = Accelerator(cpu=True, activation_checkpointing=["Layer"])
    with pytest.raises(ValueError, match="activation_checkpointing=\\('Layer',\\): 'Layer' match.*Block"):
        accelerator.prepare(make_transformer())


def test_a_model_without_repeated_blocks_asks_for_the_class_names() -> None:
    accelerator = Accelerator(cpu=True, activation_checkpointing=True)
    with pytest.raises(ValueError, match="no _no_split_modules and no nn.ModuleList of identical blocks.*Linear"):
        accelerator.prepare(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))


class _Wrapped(nn.Module):
    """A Hugging Face style model: its block class in _no_split_modules, the blocks not in a ModuleList."""

    _no_split_modules = ["Block", "NotHere"]

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = Block(), Block()
        self.mixed = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])


def test_blocks_are_found_by_name_then_no_split_modules_then_repeated_lists() -> None:
    model = make_transformer()
    assert find_blocks(model, None, "x") == list(model.blocks)
    norms = find_blocks(model, ["LayerNorm"], "x")  # by name: every module of the class, in order
    assert norms == [norm for block in model.blocks for norm in (block.norm1, block.norm2)] + [model.norm]
    wrapped = _Wrapped()
    assert find_blocks(wrapped, None, "x") == [wrapped.first, wrapped.second]  # _no_split_modules, not the Linear list
    assert find_blocks(wrapped, ["Block", "Linear"], "x") == [wrapped.first, wrapped.second, *wrapped.mixed]
    nested = nn.ModuleList([nn.Sequential(nn.ModuleList([nn.ReLU()])), nn.Sequential(nn.ModuleList([nn.ReLU()]))])
    assert find_blocks(nn.Sequential(nested), None, "x") == list(nested)  # the outermost list only


def test_checkpointing_twice_is_once() -> None:
    model = make_transformer()
    assert len(checkpoint_blocks(model, True)) == 4
    assert len(checkpoint_blocks(model, ["Block"])) == 4  # already on: left as it is, no error
    assert checkpoint_blocks(model, False) == []


def test_a_transformers_model_has_its_no_split_modules_checkpointed_with_the_same_gradients() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                      num_key_value_heads=2, vocab_size=64)
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    runs = []
    for blocks in (False, True):
        torch.manual_seed(0)
        model = Accelerator(cpu=True, activation_checkpointing=blocks).prepare(transformers.LlamaForCausalLM(config))
        kept, loss = saved_bytes(lambda model=model: model(input_ids=tokens, labels=tokens).loss)
        loss.backward()
        runs.append((kept, {name: p.grad for name, p in model.named_parameters()}, model))
    (plain_bytes, plain, _), (kept_bytes, checkpointed, model) = runs
    assert all(is_checkpointed(layer) for layer in model.model.layers)  # LlamaDecoderLayer: its _no_split_modules
    assert plain.keys() == checkpointed.keys()
    assert all(torch.equal(plain[name], checkpointed[name]) for name in plain)
    assert kept_bytes < plain_bytes / 4  # 50,052 against 330,628 bytes here
