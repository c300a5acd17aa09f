"""The parallelism strategy: chosen once by the Accelerator, asked by everything else."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from accel import Accelerator
from accel.parallel.strategy import DataParallelStrategy, ParallelStrategy


def test_without_a_plugin_the_strategy_is_data_parallel_and_keeps_whole_checkpoints() -> None:
    accelerator = Accelerator(cpu=True)
    strategy = accelerator.strategy
    assert type(strategy) is DataParallelStrategy
    assert not strategy.shards_parameters and not strategy.sharded_checkpoints
    assert strategy.checkpoint_record() is None


def test_in_one_process_the_model_is_not_wrapped_and_no_sync_has_nothing_to_skip() -> None:
    accelerator = Accelerator(cpu=True)
    model = nn.Linear(3, 2)
    prepared = accelerator.prepare(model)
    assert prepared is model
    assert isinstance(accelerator.strategy.no_sync(model), contextlib.nullcontext)


def test_clipping_and_full_weights_go_through_the_strategy() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 2))
    model(torch.ones(4, 3)).sum().backward()
    expected = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=1e-3)
    assert torch.allclose(norm, expected)
    clipped = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(clipped, torch.tensor(1e-3), rtol=1e-3)
    weights = accelerator.strategy.full_state_dict(model)
    assert set(weights) == {"weight", "bias"} and torch.equal(weights["weight"], model.weight.detach())


def test_loading_full_weights_fills_the_model() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 2))
    source = nn.Linear(3, 2)
    accelerator.strategy.load_full_weights(model, source.state_dict())
    assert torch.equal(model.weight, source.weight) and torch.equal(model.bias, source.bias)
    assert accelerator.strategy.weight_shapes(model) is None


def test_a_run_without_deepspeed_refuses_deepspeeds_shards_as_before() -> None:
    """The shard reading of the strategies without DeepSpeed (accel.parallel.sharded_checkpoints) refuses a
    checkpoint DeepSpeed wrote before reading any file, with the message it always gave; the interface itself
    reads no shards."""
    accelerator = Accelerator(cpu=True)
    manifest = SimpleNamespace(fsdp={"state_dict_type": "SHARDED_STATE_DICT", "engine": "deepspeed", "zero_stage": 2})
    problems = accelerator.strategy.shard_problems(accelerator, Path("nowhere"), manifest, [], "load_state")
    assert problems == ["it holds DeepSpeed's ZeRO checkpoint, which only a run with deepspeed_plugin loads"]
    interface = ParallelStrategy(accelerator.process_state, accelerator.precision, accelerator.handlers)
    with pytest.raises(NotImplementedError, match="ParallelStrategy reads no shards"):
        interface.shard_problems(accelerator, Path("nowhere"), manifest, [], "load_state")
    with pytest.raises(NotImplementedError, match="DataParallelStrategy writes no shards"):
        accelerator.strategy.write_shards(accelerator, Path("nowhere"))
