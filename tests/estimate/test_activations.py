"""Activations estimated on fake tensors equal what a real CPU run saves for backward, byte for byte, and
are within 15% of the peak the profiler measures over forward and backward (the example GPT, with and
without its blocks checkpointed; a transformers Llama)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from accel.bench.gpt import GPT, GPTConfig
from accel.estimate.activations import activation_bytes
from accel.training.blocks import checkpoint_blocks


def gpt_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(ids).flatten(0, 1).float(), ids.flatten())


def saved_for_backward(model: nn.Module, loss: Callable[[], torch.Tensor]) -> int:
    """What autograd really saves in `loss()`'s forward: each storage once, the parameters left out."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss()
    return sum(seen.values())


def measured_peak(model: nn.Module, loss: Callable[[], torch.Tensor]) -> int:
    """The highest sum of the CPU allocations the profiler sees over forward and backward, the gradients
    allocated beforehand (they are the training table's, not activations)."""
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as run:
        loss().backward()
    events = sorted((e for e in run.profiler.kineto_results.events() if e.name() == "[memory]"),  # type: ignore[union-attr]
                    key=lambda e: e.start_ns())
    now = peak = 0
    for event in events:
        now += event.nbytes()
        peak = max(peak, now)
    return peak


@pytest.mark.parametrize("batch", [8, 32])
def test_the_example_gpt(batch: int) -> None:
    with torch.device("meta"):
        estimate = activation_bytes(GPT(GPTConfig()), batch, 64)
    torch.manual_seed(0)
    ids = torch.randint(0, GPTConfig().vocab_size, (batch, 64))
    model = GPT(GPTConfig())
    assert estimate.saved == saved_for_backward(model, lambda: gpt_loss(model, ids))
    assert 0.85 <= estimate.saved / measured_peak(model, lambda: gpt_loss(model, ids)) <= 1.15
    checkpointed = GPT(GPTConfig())
    assert len(checkpoint_blocks(checkpointed, True)) == GPTConfig().n_layer
    assert estimate.checkpointed is not None and estimate.checkpointed < estimate.saved / 2
    assert 0.85 <= estimate.checkpointed / measured_peak(checkpointed, lambda: gpt_loss(checkpointed, ids)) <= 1.15


@pytest.mark.parametrize("precision", ["bf16", "bf16-true"])
def test_sixteen_bits_save_what_a_real_run_saves(precision: str) -> None:
    with torch.device("meta"):
        estimate = activation_bytes(GPT(GPTConfig()), 4, 32, precision)
    model = GPT(GPTConfig())
    ids = torch.randint(0, GPTConfig().vocab_size, (4, 32))
    if precision == "bf16-true":
        model.to(torch.bfloat16)
        assert estimate.saved == saved_for_backward(model, lambda: gpt_loss(model, ids))
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert estimate.saved == saved_for_backward(model, lambda: gpt_loss(model, ids))
    with torch.device("meta"):
        assert estimate.saved < activation_bytes(GPT(GPTConfig()), 4, 32).saved * (0.75 if precision == "bf16-true" else 1.5)


def test_a_transformers_llama_with_its_own_loss() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=300)
    with torch.device("meta"):
        estimate = activation_bytes(LlamaForCausalLM(config), 2, 48)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 300, (2, 48))
    assert estimate.saved == saved_for_backward(model, lambda: model(input_ids=ids, labels=ids).loss)
    assert estimate.checkpointed is not None and estimate.checkpointed < estimate.saved


def test_fp8_is_refused_by_name() -> None:
    with torch.device("meta"), pytest.raises(ValueError, match="precision='fp8-native-O1': activations are not"):
        activation_bytes(GPT(GPTConfig()), 1, 8, "fp8-native-O1")
