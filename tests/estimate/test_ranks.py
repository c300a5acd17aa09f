"""The per-rank estimate equals what real runs hold, byte for byte, on several processes: native FP8 O1/O2
under DDP on 2 and 4 processes (the converted layers' float16 weights, FP8 gradients and O2's moments on every
rank; DDP's buckets holding only the other gradients, as torch reports them; layers sharing a weight left in
float32), and bitsandbytes 4-bit under DDP
and FSDP2 on 2 (ranks_script.py). O1/O2 under FSDP2 are refused, as accel refuses them."""

from __future__ import annotations

import pytest
from launching import Launched, launch
from ranks_script import fp8_model

from accel import Accelerator, FP8RecipeKwargs
from accel.estimate.training import training_bytes

FP8_CASES = {"fp8-O1-adamw", "fp8-O2-adamw", "fp8-O1-sgd-momentum", "fp8-O2-adamw-tied"}
QUANT_CASES = {"nf4-dq-hand-ddp-bf16", "nf4-plain-ddp-no", "nf4-dq-plain-fsdp-no"}


@pytest.fixture(scope="module", params=[2, 4])
def launched(request: pytest.FixtureRequest) -> Launched:
    cases = ["fp8", "quant"] if request.param == 2 else ["fp8"]
    run = launch("../../estimate/ranks_script.py", *cases, processes=request.param, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    return run


def test_ranks_hold_what_was_estimated(launched: Launched) -> None:
    per_rank = launched.of("cases")
    expected = FP8_CASES | (QUANT_CASES if len(per_rank) == 2 else set())
    assert len(per_rank) == len(launched.results) and all(set(cases) == expected for cases in per_rank)
    for cases in per_rank:
        for name, (held, estimate, buckets) in cases.items():
            assert held == estimate[:3], name
            assert buckets == estimate[3], name  # DDP's buckets: the gradients it reduces (0 under FSDP2)
            if name.startswith("fp8"):  # the FP8 gradients are averaged by accel, outside the buckets
                assert 0 < buckets < held[1], name
    fp8 = [{name: cases[name] for name in FP8_CASES} for cases in per_rank]
    assert all(cases == fp8[0] for cases in fp8)  # DDP: every rank holds the same
    if len(per_rank) == 2:  # FSDP2: padded shards of the packed weights; optimizer state of own rows
        first, second = (cases["nf4-dq-plain-fsdp-no"][0] for cases in per_rank)
        assert first[:2] == second[:2] and first[2] != second[2]


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_o1_o2_under_fsdp_are_refused_as_accel_refuses_them(level: str) -> None:
    from accel.backends.fp8.native import NATIVE_FSDP_STORAGE
    from accel.fsdp import FullyShardedDataParallelPlugin

    with pytest.raises(ValueError, match="cannot run on backend='native' under FSDP") as refused:
        Accelerator(cpu=True, mixed_precision="fp8", fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
                    kwarg_handlers=[FP8RecipeKwargs(backend="native", optimization_level=level)])
    for layout, shard_size in (("fsdp", None), ("hsdp", 2)):
        with pytest.raises(ValueError, match=f"optimization_level='{level}'") as estimated:
            training_bytes(fp8_model(), f"fp8-native-{level}", layout, 4, shard_size=shard_size, device="cpu")
        assert NATIVE_FSDP_STORAGE in str(refused.value) and NATIVE_FSDP_STORAGE in str(estimated.value)
    [fp8] = training_bytes(fp8_model(), "fp8-native", "fsdp", 1, device="cpu")  # without a level: estimated
    assert fp8.total > 0


def test_ddp_ranks_hold_one_copy_each_and_buckets_only_the_unconverted_gradients() -> None:
    """At 4 processes every rank holds the one-process storage; only the unconverted layer's gradient (5 x 16
    weights and 5 biases, float32) is in DDP's buckets: 340 bytes, not the 2,756 of all gradients."""
    [one] = training_bytes(fp8_model(), "fp8-native-O2", "ddp", 1, "adamw", device="cpu")
    ranks = training_bytes(fp8_model(), "fp8-native-O2", "ddp", 4, "adamw", device="cpu")
    assert all(rank.buffers == (5 * 16 + 5) * 4 for rank in ranks)
    assert all(rank.total == one.total + rank.buffers for rank in ranks)
    assert ranks[0].gradients == one.gradients > ranks[0].buffers
