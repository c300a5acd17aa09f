"""cpu_ram_efficient_loading and init_module(empty_init=True) with 2 real processes (gloo, CPU): process 0
alone reads the weights, the others build on the meta device, and after prepare every process's shards,
and the training that follows, equal those of the model every process built in full."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from launching import Launched, launch

SCRIPT = "../../fsdp/meta_loading_script.py"
TOKENS = torch.arange(12).reshape(2, 6) % 100


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, tie_word_embeddings=True)
    folder = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _run(mode: str, llama_dir: Path) -> Launched:
    result = launch(SCRIPT, mode, str(llama_dir), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def normal(llama_dir: Path) -> Launched:
    return _run("normal", llama_dir)


@pytest.fixture(scope="module")
def rank0(llama_dir: Path) -> Launched:
    return _run("rank0", llama_dir)


def test_processes_other_than_0_build_on_the_meta_device_inside_init_module(rank0: Launched) -> None:
    first, second = rank0.of("tiny_meta_before")
    assert not any(first) and all(second) and len(second) == 12


def test_every_shard_after_prepare_equals_the_normally_loaded_models(rank0: Launched, normal: Launched) -> None:
    assert rank0.of("tiny_shards") == normal.of("tiny_shards")
    first, second = normal.of("tiny_shards")
    assert first != second  # each process holds its own half


def test_a_model_every_process_built_in_full_gets_process_0s_weights_as_in_accelerate(
    rank0: Launched, normal: Launched
) -> None:
    assert rank0.of("whole_shards") == normal.of("tiny_shards")


def test_training_after_rank0_loading_equals_the_normal_run_exactly(rank0: Launched, normal: Launched) -> None:
    assert rank0.of("tiny_losses") == normal.of("tiny_losses")
    assert rank0.of("tiny_trained_shards") == normal.of("tiny_trained_shards")


def test_empty_init_builds_on_meta_and_prepare_allocates_shards_that_take_the_weights(
    rank0: Launched, normal: Launched
) -> None:
    assert rank0.of("empty_meta_before") == [True, True]
    assert rank0.of("empty_meta_after") == [False, False]
    assert rank0.of("empty_loaded_shards") == normal.of("tiny_shards")


def test_a_transformers_model_is_read_on_process_0_only_and_keeps_its_ties_and_buffers(
    rank0: Launched, llama_dir: Path
) -> None:
    from transformers import LlamaForCausalLM

    assert rank0.of("llama_meta_before") == [[False], [True]]
    assert rank0.of("llama_tied") == [True, True]
    reference = LlamaForCausalLM.from_pretrained(llama_dir)
    expected = {name: p.tolist() for name, p in reference.named_parameters()}
    assert rank0.of("llama_full") == [expected, expected]
    buffers = {name: b.tolist() for name, b in reference.named_buffers()}
    assert rank0.of("llama_buffers") == [buffers, buffers]
    loss = reference(input_ids=TOKENS, labels=TOKENS).loss.item()
    for sharded in rank0.of("llama_loss"):
        assert sharded == pytest.approx(loss, rel=1e-5)
