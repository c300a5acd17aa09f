"""The plan at scale: the real sharding code on torch's fake process group, in this one process.

A tensor-parallel layout's plan equals what real runs hold, rank by rank (2 processes tp=2, 4 processes FSDP2 x
tp); the Llama-3 8B and 70B plans at 8, 64 and 1,024 ranks equal the FSDP/ZeRO-3 accounting done by hand; layouts
that cannot shard are refused naming the dimension."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from launching import Launched, launch
from plan_script import tiny_llama

from accel.estimate.models import build_on_meta
from accel.estimate.plan import plan_layout
from accel.estimate.training import training_bytes
from accel.parallel.config import ParallelismConfig


def _meta_tiny_llama() -> torch.nn.Module:
    with torch.device("meta"):
        return tiny_llama()


@pytest.fixture(scope="module", params=[(1, 2, "no"), (2, 2, "bf16")], ids=["tp2", "fsdp2xtp2-bf16"])
def launched(request: pytest.FixtureRequest) -> tuple[tuple[int, int, str], Launched]:
    dp_shard, tp, precision = request.param
    run = launch("../../estimate/plan_script.py", str(dp_shard), str(tp), precision, processes=dp_shard * tp,
                 timeout=240)
    assert run.returncode == 0, run.stderr[-4000:]
    return request.param, run


def test_a_tensor_parallel_plan_holds_what_real_ranks_hold(launched: tuple[tuple[int, int, str], Launched]) -> None:
    (dp_shard, tp, precision), run = launched
    world = dp_shard * tp
    plans = plan_layout(_meta_tiny_llama, ParallelismConfig(dp_shard_size=dp_shard, tp_size=tp), world, precision,
                        ranks=range(world))
    assert [[p.held.parameters, p.held.gradients, p.held.optimizer] for p in plans] == run.of("held")
    assert [{name: list(shape) for name, shape in p.shapes.items()} for p in plans] == run.of("shapes")
    split = plans[0].shapes["model.layers.0.self_attn.q_proj.weight"]
    assert split == (32 // tp // dp_shard, 32)  # split by tp on its rows, then sharded over dp_shard
    assert [p.coordinates.get("tp") for p in plans] == [rank % tp for rank in range(world)]


MODELS = {"llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496}  # parameters, untied head


@pytest.mark.parametrize("world", [8, 64, 1024])
@pytest.mark.parametrize("name", list(MODELS))
def test_llama3_fsdp_plans_at_scale_equal_the_zero_3_accounting(name: str, world: int) -> None:
    config = ParallelismConfig(dp_shard_size=world) if world != 64 else ParallelismConfig(dp_replicate_size=8,
                                                                                          dp_shard_size=8)
    first, last = plan_layout(lambda: build_on_meta(name), config, world, "bf16")  # seconds each: docs/memory.md
    shards = config.dp_shard_size
    model = build_on_meta(name)
    assert sum(p.numel() for p in model.parameters()) == MODELS[name]
    # by hand: every tensor in chunks of ceil(rows / shards) rows, the last ranks' chunks short or empty;
    # mixed bf16 holds float32 weights and gradients padded to the chunk, Adam's two float32 moments of its own rows
    padded = sum(math.ceil(p.shape[0] / shards) * p[0].numel() * 4 for p in model.parameters())
    steps = 4 * len(list(model.parameters()))
    assert first.held.parameters == first.held.gradients == padded
    assert first.held.optimizer == 2 * padded + steps  # the first shard is full: all its rows are its own
    own_last = sum(max(0, p.shape[0] - (shards - 1) * math.ceil(p.shape[0] / shards)) * p[0].numel() * 4
                   for p in model.parameters())
    assert last.held.optimizer == 2 * own_last + steps
    # ZeRO's accounting, 16 bytes a parameter over the shards, up to the padding of the chunks
    assert first.held.total == pytest.approx(16 * MODELS[name] / shards, rel=0.01 if shards < 1024 else 0.2)
    layout = "hsdp" if config.dp_replicate_size > 1 else "fsdp"
    formula = training_bytes(model, "bf16", layout, world, shard_size=shards)
    assert [first.held, last.held] == [formula[0], formula[-1]]


def test_llama3_70b_with_tensor_parallelism_at_1024_ranks() -> None:
    first, last = plan_layout(lambda: build_on_meta("llama3-70b"), ParallelismConfig(dp_shard_size=128, tp_size=8),
                              1024, "bf16-true", optimizer="sgd")
    assert first.coordinates == {"dp_shard": 0, "tp": 0} and last.coordinates == {"dp_shard": 127, "tp": 7}
    assert first.shapes["model.layers.0.self_attn.k_proj.weight"] == (1, 8192)  # 1,024 rows: 128 a tp rank, 1 a shard
    assert first.shapes["model.layers.0.mlp.down_proj.weight"] == (64, 3584)  # row-wise: 28,672 columns / 8, then
    # its 8,192 rows over the 128 shards
    assert first.held.parameters == pytest.approx(2 * MODELS["llama3-70b"] / 1024, rel=0.01)


@pytest.mark.parametrize(("config", "world", "said"), [
    (ParallelismConfig(tp_size=16), 16, "tp_size=16 does not divide the model's config.num_key_value_heads=8"),
    (ParallelismConfig(dp_shard_size=2, tp_size=3), 6, "tp_size=3 does not divide layer 'model.layers.0.self_attn"
     ".q_proj' .*out_features is 4096"),
    (ParallelismConfig(dp_shard_size=3, tp_size=2), 8, r"dp_shard_size=3 \* tp_size=2 .* = 6 processes, but the world "
     "size .* is 8"),
    (ParallelismConfig(dp_shard_size=2, cp_size=2), 4, "cp_size=2, sp_size=1: the plan covers"),
])
def test_a_layout_that_cannot_shard_is_refused_naming_the_dimension(config: ParallelismConfig, world: int,
                                                                    said: str) -> None:
    with pytest.raises(ValueError, match=said):
        plan_layout(lambda: build_on_meta("llama3-8b"), config, world)
    assert not dist.is_initialized()  # the fake group is gone after a refusal too


def test_bad_ranks_and_a_running_group_are_refused() -> None:
    with pytest.raises(ValueError, match="ranks: 8 is not a rank of a world of 8 processes"):
        plan_layout(_meta_tiny_llama, ParallelismConfig(dp_shard_size=8), 8, ranks=[8])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="make it outside a distributed run"):
            plan_layout(_meta_tiny_llama, ParallelismConfig(dp_shard_size=2), 2)
    finally:
        dist.destroy_process_group()
