"""The ZeRO and tensor-parallel communication estimates equal what real runs hand to torch.distributed, byte for
byte, per rank, step and collective kind: a process group that counts every collective (counting.py, gloo under
it) trains odd_model() (odd sizes, a frozen layer, a tied weight) under DeepSpeed ZeRO 1, 2 and 3 in fp32 and bf16,
and a tiny transformers Llama split by its own tp_plan (tp=2; on four processes FSDP2 over dp_shard=2 too), on two
and four processes: one launch each, every case in it (communication_zero_tp_script.py). ZeRO 3's one-time tracing
and the prepare broadcasts are checked apart; Llama-3-8B's numbers at scale are the closed forms."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import pytest
import torch
from communication_zero_tp_script import BATCH, SEQ, TP_CASES, TP_SIZE, ZERO_CASES, ZERO_STEPS
from estimate_script import odd_model
from launching import Launched, launch
from plan_script import tiny_llama

from accel.estimate.communication import CommBytes, communication_bytes
from accel.estimate.communication_zero import ZeroOptions
from accel.estimate.models import build_on_meta

STEP_KINDS = ("all_reduce", "all_gather", "reduce_scatter")
OPTIONS = {"stage3_param_persistence_threshold": "param_persistence_threshold",
           "stage3_max_reuse_distance": "max_reuse_distance"}


@pytest.fixture(scope="module")
def runs() -> dict[int, Launched]:
    """The launches made so far, by process count."""
    return {}


def launched(runs: dict[int, Launched], processes: int) -> Launched:
    if processes not in runs:
        runs[processes] = launch("../../estimate/communication_zero_tp_script.py", processes=processes, timeout=300)
    assert runs[processes].returncode == 0, runs[processes].stderr[-4000:]
    return runs[processes]


@functools.cache
def zero_estimate(name: str, processes: int) -> CommBytes:
    """On the CPU accel sets stage3_allgather_sequential, which makes DeepSpeed prefetch one parameter at a time."""
    case = ZERO_CASES[name]
    options = ZeroOptions(allgather_sequential=True, **{OPTIONS[key]: value for key, value in case["zero"].items()
                                                        if key in OPTIONS})
    return communication_bytes(odd_model(), case["precision"], f"zero{case['stage']}", processes, zero=options,
                               gradient_accumulation_steps=case.get("accumulation", 1))


@functools.cache
def tp_estimate(precision: str, processes: int) -> CommBytes:
    with torch.device("meta"):
        model = tiny_llama()
    return communication_bytes(model, precision, "tp", processes, tp_size=TP_SIZE, batch_size=BATCH, seq_len=SEQ)


def by_kind(records: list[list[Any]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for kind, size, _ in records:
        total[kind] += size
    return dict(total)


def per_step(estimate: CommBytes) -> dict[str, int]:
    return {kind: getattr(estimate, kind) for kind in STEP_KINDS if getattr(estimate, kind)}


@pytest.mark.parametrize("processes", [2, 4])
def test_zero_steps_hand_what_was_estimated(runs: dict[int, Launched], processes: int) -> None:
    """Every rank, case and steady step (the third on): each kind's bytes equal the estimate, nothing else runs, over
    all processes. The first two steps add ZeRO 3's tracing: its first micro-batch's gathers, its checks' broadcasts."""
    for rank, cases in enumerate(launched(runs, processes).of("zero")):
        for name, case in ZERO_CASES.items():
            estimate, done = zero_estimate(name, processes), cases[name]
            assert len(done["steps"]) == ZERO_STEPS
            for step in done["steps"][2:]:
                assert by_kind(step) == per_step(estimate), (rank, name)
                assert all(ranks == list(range(processes)) for _, _, ranks in step)
            first = Counter(by_kind(done["steps"][0])) + Counter(by_kind(done["steps"][1]))
            traced = Counter({kind: 2 * size for kind, size in per_step(estimate).items()})
            traced.update({"all_gather": estimate.trace_all_gather, "broadcast": estimate.trace_broadcast})
            assert first == +traced, (rank, name)
            assert (estimate.trace_all_gather > 0) == (case["stage"] == 3)


@pytest.mark.parametrize("processes", [2, 4])
def test_zero_prepare_broadcasts_the_parameters(runs: dict[int, Launched], processes: int) -> None:
    """deepspeed.initialize broadcasts the 154 parameters in the engine's dtype, twice under ZeRO 3."""
    for cases in launched(runs, processes).of("zero"):
        for name, case in ZERO_CASES.items():
            estimate = zero_estimate(name, processes)
            assert by_kind(cases[name]["prepare"])["broadcast"] == estimate.prepare_broadcast, name
            assert estimate.prepare_broadcast == 154 * (2 if case["precision"] == "bf16" else 4) * (
                2 if case["stage"] == 3 else 1)


@pytest.mark.parametrize("processes", [2, 4])
def test_tensor_parallel_steps_hand_what_was_estimated(runs: dict[int, Launched], processes: int) -> None:
    """Every rank and step: each kind's bytes equal the estimate; the activations' collectives span the tp group
    (ranks sharing rank // 2), FSDP2's the dp_shard group (ranks sharing rank % 2); prepare's broadcast too."""
    for rank, cases in enumerate(launched(runs, processes).of("tp")):
        tp_group = [r for r in range(processes) if r // TP_SIZE == rank // TP_SIZE]
        shard_group = [r for r in range(processes) if r % TP_SIZE == rank % TP_SIZE]
        for precision in TP_CASES:
            estimate, done = tp_estimate(precision, processes), cases[precision]
            assert (estimate.tp_group, estimate.shard_group) == (TP_SIZE, processes // TP_SIZE)
            for step in done["steps"]:
                assert by_kind(step) == per_step(estimate), (rank, precision)
                on_tp = sum(size for _, size, ranks in step if ranks == tp_group)
                assert on_tp == estimate.tp_all_reduce + estimate.tp_all_gather
                assert sum(size for _, size, ranks in step if ranks == shard_group and ranks != tp_group) == (
                    estimate.per_step - on_tp)
            assert by_kind(done["prepare"])["broadcast"] == estimate.prepare_broadcast


@pytest.mark.parametrize("processes", [2, 4])
def test_nothing_runs_uncounted(runs: dict[int, Launched], processes: int) -> None:
    assert launched(runs, processes).of("unseen") == [0] * processes


def test_tensor_parallel_dtypes_and_counts() -> None:
    """The tiny Llama (2 layers, hidden 32, 66 tokens), 16 tokens: forward, the embedding's and 2 row-wise outputs
    a layer all-reduced (16 x 32), the logits all-gathered (16 x 66); backward, the inputs of the 5 column-wise
    projections a layer and of lm_head. bf16: the row-wise outputs and the logits in 16 bits, the rest float32."""
    tokens, hidden = BATCH * SEQ, 32
    fp32 = tp_estimate("no", 2)
    assert (fp32.tp_all_reduce, fp32.tp_all_gather) == ((1 + 2 * 2 + 2 * 5 + 1) * tokens * hidden * 4, tokens * 66 * 4)
    bf16 = tp_estimate("bf16", 2)
    assert bf16.tp_all_reduce == tokens * hidden * (4 + 2 * 2 * 2 + (2 * 5 + 1) * 4)
    assert bf16.tp_all_gather == tokens * 66 * 2
    sharded = tp_estimate("bf16", 4)  # FSDP2 casts the weights to bf16 too: every activation in 16 bits
    assert sharded.tp_all_reduce == (1 + 2 * 2 + 2 * 5 + 1) * tokens * hidden * 2


PSI = 8_030_261_248  # Llama-3-8B's parameters
NORMS = 65 * 4096  # its RMSNorm weights: under ZeRO 3's persistence threshold, and replicated by tensor parallelism


@pytest.fixture(scope="module")
def llama3_8b() -> torch.nn.Module:
    return build_on_meta("llama3-8b")


def test_zero_at_scale_is_the_closed_form(llama3_8b: torch.nn.Module) -> None:
    """64 ranks, bf16: ZeRO 1-2 all-reduce 2 bytes a parameter (ZeRO 2 at each of 4 micro-batches) plus the norm (4)
    and the flag (1), then gather the updated weights (8,030,261,248 divides by 2 x 64: no padding); ZeRO 3
    reduce-scatters 2 bytes a parameter a micro-batch and gathers each parameter once when nothing is released
    before its last use, twice (forward, backward) but the persistent norms when every use releases it; DeepSpeed's
    defaults lie between."""
    zero1 = communication_bytes(llama3_8b, "bf16", "zero1", 64, gradient_accumulation_steps=4)
    zero2 = communication_bytes(llama3_8b, "bf16", "zero2", 64, gradient_accumulation_steps=4)
    assert (zero1.all_reduce, zero1.all_gather) == (2 * PSI + 5, 2 * PSI)
    assert (zero2.all_reduce, zero2.all_gather, zero2.reduce_scatter) == (4 * 2 * PSI + 5, 2 * PSI, 0)
    keep = communication_bytes(llama3_8b, "bf16", "zero3", 64, zero=ZeroOptions(max_reuse_distance=10**12))
    release = communication_bytes(llama3_8b, "bf16", "zero3", 64, zero=ZeroOptions(max_reuse_distance=0,
                                                                                   prefetch_bucket_size=0))
    default = communication_bytes(llama3_8b, "bf16", "zero3", 64)
    assert (keep.all_gather, keep.reduce_scatter, keep.all_reduce) == (2 * PSI, 2 * PSI, 8)
    assert release.all_gather == 2 * 2 * (PSI - NORMS) + 2 * NORMS
    assert keep.all_gather < default.all_gather < release.all_gather
    assert default.ring_bytes == (default.all_gather + default.reduce_scatter + 2 * 8) * 63 / 64


def test_tensor_parallel_at_scale_is_the_closed_form(llama3_8b: torch.nn.Module) -> None:
    """tp=8, one 4096-token sequence, bf16: forward the embedding's all-reduce (float32) and 2 a layer (bf16), the
    logits gathered (bf16); backward 5 a layer and lm_head's, float32. With dp_shard 8 (64 processes) FSDP2 gathers
    (twice) and reduce-scatters each tp rank's part: the split weights / 8, the norms whole."""
    tokens, hidden, vocab, layers = 4096, 4096, 128256, 32
    tp = communication_bytes(llama3_8b, "bf16", "tp", 8, tp_size=8, batch_size=1, seq_len=tokens)
    assert tp.all_reduce == tokens * hidden * (4 + layers * 2 * 2 + (layers * 5 + 1) * 4)
    assert (tp.all_gather, tp.reduce_scatter, tp.shard_group) == (tokens * vocab * 2, 0, 1)
    both = communication_bytes(llama3_8b, "bf16", "tp", 64, tp_size=8, batch_size=1, seq_len=tokens)
    local = (PSI - NORMS) // 8 + NORMS
    assert (both.reduce_scatter, both.all_gather - both.tp_all_gather) == (4 * local, 2 * 2 * local)
    assert both.tp_all_reduce == tokens * hidden * 2 * (1 + layers * 2 + layers * 5 + 1)  # all bf16 under FSDP2
    assert both.ring_bytes == (both.all_gather - both.tp_all_gather + both.reduce_scatter) * 7 / 8 + (
        2 * both.tp_all_reduce + both.tp_all_gather) * 7 / 8


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"layout": "zero2", "precision": "bf16-true"}, "precision='bf16-true' under layout='zero2'"),
    ({"layout": "zero3", "sync_each_batch": True}, "sync_each_batch"),
    ({"layout": "tp", "tp_size": 3}, "tp_size"),
    ({"layout": "tp", "tp_size": 2}, "batch_size and seq_len"),
])
def test_bad_input_names_the_argument(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        communication_bytes(torch.nn.Linear(2, 2), processes=4, **kwargs)
