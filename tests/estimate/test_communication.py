"""The communication estimate equals what real runs hand to torch.distributed, byte for byte, per rank and per
collective kind: a process group that counts every collective (counting.py, gloo underneath) trains
odd_model() (odd row counts: FSDP2 pads them; a frozen layer; a tied weight) under DDP and FSDP2 on two
processes and HSDP (2 groups of 2 shards) on four, in several precisions, with gradient accumulation, with
FSDP's reshard_after_forward off (communication_script.py's CASES). What `Accelerator()` and `prepare` send is
counted apart and checked too: prepare's broadcast of the weights, plus accel's object gathers."""

from __future__ import annotations

import doctest
from collections import Counter
from typing import Any

import pytest
import torch
import torch.distributed as dist
from communication_script import CASES, STEPS
from counting import CountingGroup
from estimate_script import odd_model
from launching import Launched, launch

import accel.estimate.communication as communication
from accel.estimate.communication import CommBytes, communication_bytes

PROCESSES = {"ddp": 2, "fsdp": 2, "hsdp": 4}
STEP_KINDS = ("all_reduce", "all_gather", "reduce_scatter")


@pytest.fixture(scope="module", params=list(CASES))
def launched(request: pytest.FixtureRequest) -> tuple[str, Launched]:
    layout = request.param
    run = launch("../../estimate/communication_script.py", layout, processes=PROCESSES[layout], timeout=240)
    assert run.returncode == 0, run.stderr[-4000:]
    return layout, run


def _estimates(layout: str) -> list[CommBytes]:
    return [communication_bytes(odd_model(), layout=layout, processes=PROCESSES[layout], **case) for case in CASES[layout]]


def _by_kind(records: list[list[Any]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for kind, size, _ in records:
        total[kind] += size
    return dict(total)


def test_each_step_hands_what_was_estimated(launched: tuple[str, Launched]) -> None:
    """Every rank, every case, every optimizer step: the bytes of each kind equal the estimate, and nothing
    else runs but DDP's one-time broadcast of its rebuilt bucket order at the second step."""
    layout, run = launched
    for rank, cases in enumerate(run.of("cases")):
        for case, estimate, done in zip(CASES[layout], _estimates(layout), cases, strict=True):
            expected = {kind: getattr(estimate, kind) for kind in STEP_KINDS if getattr(estimate, kind)}
            assert len(done["steps"]) == STEPS
            for step, records in enumerate(done["steps"]):
                once = estimate.bucket_rebuild_broadcast if step == 1 else 0
                assert _by_kind(records) == {**expected, **({"broadcast": once} if once else {})}, (rank, case, step)
            assert estimate.per_step > 0 and (layout != "ddp" or estimate.bucket_rebuild_broadcast > 0)


def test_collectives_span_the_estimated_groups(launched: tuple[str, Launched]) -> None:
    """All-gathers, reduce-scatters and fp16's found-inf all-reduce span the shard group (ranks sharing
    rank // shard_size), the gradients' all-reduce the replica group (ranks sharing rank % shard_size)."""
    layout, run = launched
    processes = PROCESSES[layout]
    for rank, cases in enumerate(run.of("cases")):
        for estimate, done in zip(_estimates(layout), cases, strict=True):
            shard = [r for r in range(processes) if r // estimate.shard_group == rank // estimate.shard_group]
            replica = [r for r in range(processes) if r % estimate.shard_group == rank % estimate.shard_group]
            for kind, size, ranks in done["steps"][0]:
                scaler = kind == "all_reduce" and size == estimate.scaler_all_reduce
                assert ranks == (shard if kind != "all_reduce" or scaler else replica), (rank, kind, size)
            assert len(replica) == estimate.replica_group


def test_setup_is_counted_apart(launched: tuple[str, Launched]) -> None:
    """prepare broadcasts process 0's weights (the estimate's prepare_broadcast, 154 float32 values) over all
    processes; the rest of the setup is accel's object gathers (pickled layouts), at Accelerator() and prepare."""
    layout, run = launched
    for cases in run.of("cases"):
        for estimate, done in zip(_estimates(layout), cases, strict=True):
            setup = _by_kind(done["prepare"])
            assert setup.pop("broadcast") == estimate.prepare_broadcast == 154 * 4
            assert set(setup) == {"all_gather"} and set(_by_kind(done["init"])) == {"all_gather"}
            assert all(ranks == list(range(PROCESSES[layout])) for _, _, ranks in done["init"] + done["prepare"])
    assert run.of("unseen") == [0] * PROCESSES[layout]  # gloo ran nothing that the counting group did not see


def test_counting_group_wraps_every_collective() -> None:
    """The counting group overrides each collective method of torch's ProcessGroup (one it did not would go
    to gloo uncounted; `unseen` above would tell)."""
    collectives = {name for name in dir(dist.ProcessGroup) if not name.startswith("__") and any(
        word in name for word in ("all", "reduce", "broadcast", "gather", "scatter", "barrier", "send", "recv"))}
    assert collectives - set(vars(CountingGroup)) == set()


def test_docstring_examples() -> None:
    result = doctest.testmod(communication)
    assert result.failed == 0 and result.attempted >= 3


def test_formulas_at_scale() -> None:
    """A 1,000-row weight on 64 shards is gathered as 64 chunks of 16 rows (24 rows of padding), twice a step
    in bf16 and once with reshard_after_forward=False; reduced in float32; HSDP all-reduces the shard."""
    with torch.device("meta"):
        model = torch.nn.Linear(4096, 1000, bias=False)
    fsdp = communication_bytes(model, "bf16", "fsdp", 64)
    assert (fsdp.all_gather, fsdp.reduce_scatter, fsdp.all_reduce) == (2 * 2 * 1024 * 4096, 4 * 1024 * 4096, 0)
    assert communication_bytes(model, "bf16", "fsdp", 64, reshard_after_forward=False).all_gather == 2 * 1024 * 4096
    hsdp = communication_bytes(model, "no", "hsdp", 64, shard_size=8, gradient_accumulation_steps=4)
    assert (hsdp.all_gather, hsdp.reduce_scatter, hsdp.all_reduce) == (4 * 2 * 4 * 1000 * 4096, 4 * 1000 * 4096,
                                                                       4 * 125 * 4096)
    assert (hsdp.shard_group, hsdp.replica_group) == (8, 8)
    ddp = communication_bytes(model, "bf16-true", "ddp", 8)
    assert ddp.all_reduce == 2 * 1000 * 4096 and ddp.ring_bytes == 2 * ddp.all_reduce * 7 / 8
    assert fsdp.ring_bytes == (fsdp.all_gather + fsdp.reduce_scatter) * 63 / 64
    assert communication_bytes(model, "bf16", "fsdp", 1).per_step == 0


def test_bad_input_names_the_argument() -> None:
    model = torch.nn.Linear(2, 2)
    for kwargs, named in (({"precision": "fp8-native"}, "precision='fp8-native'"), ({"layout": "zero4"}, "layout='zero4'"),
                          ({"processes": 0}, "processes=0"), ({"layout": "hsdp", "processes": 4, "shard_size": 3},
                                                              "shard_size")):
        with pytest.raises(ValueError, match=named):
            communication_bytes(model, **kwargs)
