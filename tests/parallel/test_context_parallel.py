"""Context parallelism (`cp_size` > 1): torch's context_parallel over the mesh's "cp" dimension, on CUDA only.

Here (no GPU): the refusals (a CPU run, cp without FSDP2, cp with sp, a handler that is not one), the model's
self-attention made causal by flag (its logits unchanged for an all-ones mask), and the region and rotate method
handed to torch's own functions (stand-ins that record their arguments, as torch's take them). On 2 or more GPUs:
context_script.py trains a tiny Llama with the sequence split over 2 ranks, with one process's losses."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tensor_tiny import make_llama

from accel import ParallelismConfig
from accel.distributed.process_state import ProcessState
from accel.parallel import layout
from accel.parallel.context import ContextParallel
from accel.utils import TorchContextParallelConfig

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed" / "two_processes"))
from launching import launch  # noqa: E402

HERE = Path(__file__).parent


def test_without_fsdp_it_is_refused_as_accelerate_does() -> None:
    config = ParallelismConfig(cp_size=2)
    with pytest.raises(ValueError, match="cp_size shards the sequence within FSDP2"):
        layout._check_context_parallel(config, ProcessState(device=torch.device("cuda", 0)), fsdp=False)
    layout._check_context_parallel(config, ProcessState(device=torch.device("cuda", 0)), fsdp=True)


@pytest.mark.parametrize(("sizes", "error", "words"), [
    ({"cp_size": 2, "sp_size": 2}, ValueError, "both split the sequence"),
    ({"cp_handler": TorchContextParallelConfig()}, ValueError, "with cp_size > 1"),
    ({"cp_size": 2, "cp_handler": object()}, ValueError, "give a TorchContextParallelConfig"),
])
def test_bad_context_parallel_options_are_refused_at_construction(sizes: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        ParallelismConfig(**sizes)


def test_the_comm_strategy_is_checked_and_read_from_either_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="cp_comm_strategy='ring'"):
        TorchContextParallelConfig(cp_comm_strategy="ring")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "alltoall")
    assert TorchContextParallelConfig().cp_comm_strategy == "alltoall"


class _Mesh:
    def size(self) -> int:
        return 2


def test_the_region_and_the_rotation_are_torchs(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed.tensor.experimental as experimental
    import torch.distributed.tensor.experimental._attention as attention

    calls: list[Any] = []
    monkeypatch.setattr(attention, "set_rotate_method", lambda method: calls.append(("rotate", method)))

    class _Region:
        def __init__(self, mesh: Any, **options: Any) -> None:
            calls.append(("region", mesh, options))

        def __enter__(self) -> None:
            calls.append("enter")

        def __exit__(self, *exc: Any) -> None:
            calls.append("exit")

    monkeypatch.setattr(experimental, "context_parallel", _Region)
    mesh = _Mesh()
    cp = ContextParallel({"cp": mesh}, TorchContextParallelConfig(cp_comm_strategy="alltoall"))
    ids = torch.ones(1, 8)
    with cp.region([ids], [1], {ids}):
        calls.append("step")
    assert calls == [("rotate", "alltoall"), ("region", mesh, {"buffers": [ids], "buffer_seq_dims": [1],
                                                                "no_restore_buffers": {ids}}), "enter", "step", "exit"]


def test_self_attention_loses_its_mask_for_is_causal_and_computes_the_same() -> None:
    model, plain = make_llama(), make_llama()
    for each in (model, plain):
        each.config._attn_implementation = "sdpa"
    cp = ContextParallel.__new__(ContextParallel)
    cp.mesh = _Mesh()
    cp.prepare_model(model)
    seen: list[Any] = []
    model.model.layers[0].self_attn.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append((kwargs.get("attention_mask"), kwargs.get("is_causal"))),
        with_kwargs=True)
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, plain(input_ids=ids, attention_mask=mask).logits)
    assert seen == [(None, True)]


def test_a_sliding_window_model_is_refused() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=64, sliding_window=8)
    cp = ContextParallel.__new__(ContextParallel)
    cp.mesh = _Mesh()
    with pytest.raises(ValueError, match=r"cp_size=2\): the model has \['sliding_attention'\] layers"):
        cp.prepare_model(MistralForCausalLM(config))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (context parallelism runs on CUDA only)")
def test_on_two_gpus_the_split_sequence_trains_as_one_process() -> None:
    runs = {}
    for processes in (1, 2):
        done = launch(str(HERE / "context_script.py"), str(processes), processes=processes, timeout=600,
                      launcher=[sys.executable, "-m", "accel", "launch", "--num_processes", str(processes)])
        assert done.returncode == 0, done.stderr[-4000:]
        runs[processes] = done
    reference = runs[1].of("losses")[0]
    for losses in runs[2].of("losses"):
        assert losses == pytest.approx(reference, rel=2e-3)  # flash/efficient ring kernels against one kernel
