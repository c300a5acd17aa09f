"""The pieces of sequence parallelism that need no second process: a batch cut into slices (targets and positions
of the whole sequence), the models and batches refused (with the reason), the model calls refused."""

from __future__ import annotations

import pytest
import torch
from tensor_tiny import make_llama

from accel.parallel.sequence.attention import check_model
from accel.parallel.sequence.batches import shard_sequence
from accel.parallel.sequence.loss import SequenceLoss


def _batch(length: int = 7) -> dict[str, torch.Tensor]:
    ids = torch.arange(1, 2 * length + 1).reshape(2, length)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100),
            "token_type_ids": torch.zeros_like(ids), "scale": torch.tensor(3.0)}


def test_slices_put_back_together_are_the_whole_shifted_sequence() -> None:
    batch = _batch()
    slices = [shard_sequence(batch, rank, 2) for rank in range(2)]
    whole = {name: torch.cat([piece[name] for piece in slices], dim=1) for name in ("input_ids", "shift_labels", "position_ids")}
    assert whole["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7, 0], [8, 9, 10, 11, 12, 13, 14, 0]]  # padded to 8
    assert whole["shift_labels"].tolist() == [[2, 3, 4, 5, 6, 7, -100, -100], [9, 10, 11, 12, -100, -100, -100, -100]]
    assert whole["position_ids"].tolist() == [list(range(8))] * 2
    assert set(slices[0]) == {"input_ids", "shift_labels", "position_ids", "token_type_ids", "scale"}
    assert slices[1]["token_type_ids"].shape == (2, 4) and slices[1]["scale"].item() == 3.0  # not a sequence: whole


def test_a_batch_of_shift_labels_keeps_them() -> None:
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long), "shift_labels": torch.tensor([[5, 6, 7, -100]])}
    assert shard_sequence(batch, 1, 2)["shift_labels"].tolist() == [[7, -100]]


@pytest.mark.parametrize(("change", "words"), [
    (lambda b: b.update(attention_mask=b["attention_mask"].flip(1)), "pads on the left"),
    (lambda b: b.update(labels=b["input_ids"]), "labels other than -100 at padded positions"),
    (lambda b: b.update(position_ids=torch.tensor([[0, 1, 2, 0, 1, 2, 3]] * 2)), "packed sequences"),
])
def test_batches_the_slices_would_compute_wrongly_are_refused(change, words: str) -> None:  # type: ignore[no-untyped-def]
    batch = _batch()
    change(batch)
    with pytest.raises(ValueError, match=words):
        shard_sequence(batch, 0, 2)


def test_a_batch_without_input_ids_is_refused_naming_what_it_was() -> None:
    with pytest.raises(TypeError, match="this dataloader gave a tuple"):
        shard_sequence((torch.ones(2, 4),), 0, 2)


def test_position_ids_given_as_the_batchs_own_count_are_kept() -> None:
    batch = {"input_ids": torch.ones(2, 4, dtype=torch.long), "position_ids": torch.arange(4)[None]}
    assert shard_sequence(batch, 1, 2)["position_ids"].tolist() == [[2, 3], [2, 3]]


@pytest.mark.parametrize(("build", "ranks", "words"), [
    (lambda: torch.nn.Linear(2, 2), 2, "not a transformers model"),
    (lambda: make_llama(), 2, "attention implementation is 'eager'"),
    (lambda: make_llama(heads=4, kv_heads=2), 4, "num_key_value_heads is 2, which 4 processes cannot share"),
    (lambda: make_llama(heads=2, kv_heads=2), 4, "num_attention_heads is 2, which 4"),
])
def test_models_whose_attention_cannot_be_split_are_refused(build, ranks: int, words: str) -> None:  # type: ignore[no-untyped-def]
    model = build()
    if hasattr(model, "config") and words != "attention implementation is 'eager'":
        model.config._attn_implementation = "sdpa"
    elif hasattr(model, "config"):
        model.config._attn_implementation = "eager"
    with pytest.raises(ValueError, match=words):
        check_model(model, ranks)


def test_a_sliding_window_model_is_refused() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=64, sliding_window=8, attn_implementation="sdpa")
    with pytest.raises(ValueError, match="sliding_attention"):
        check_model(MistralForCausalLM(config), 2)


@pytest.mark.parametrize(("call", "words"), [
    ({"input_ids": 1, "position_ids": 1, "labels": torch.ones(1)}, "called with labels"),
    ({"input_ids": 1}, "called without position_ids"),
])
def test_calls_a_slice_would_get_wrong_are_refused(call: dict, words: str) -> None:
    hooks = SequenceLoss(group=None, ranks=2, vocab_size=64)
    with pytest.raises(ValueError, match=words):
        hooks.before(torch.nn.Linear(1, 1), (), dict(call))
    assert hooks.before(torch.nn.Linear(1, 1), (), {"position_ids": 1, "shift_labels": 5}) == ((), {"position_ids": 1})
    assert hooks.pending == 5
