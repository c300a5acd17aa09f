"""Launched by test_communication_zero_tp.py: train through a process group that counts every collective
(counting.py) under DeepSpeed ZeRO (odd_model, ZERO_CASES) and under tensor parallelism (plan_script's tiny
Llama split in two, with FSDP2 over the other processes: TP_CASES), and report per rank what prepare and each
optimizer step handed to collectives.

One process runs every case, an Accelerator (and DeepSpeed engine) each, as zero_script.py does.
"""

from __future__ import annotations

from typing import Any

import counting
import torch
import torch.distributed as dist
from counting import GROUPS, Counter, install
from estimate_script import odd_model
from launching import report
from plan_script import tiny_llama

from accel import Accelerator

ZERO_STEPS = 3  # ZeRO 3 traces its modules in the first two micro-batches: the third step is steady
TP_STEPS = 2
STAGE3 = {"reduce_bucket_size": 64, "stage3_param_persistence_threshold": 20}
"""As zero_script.py's: the embedding (66 elements) and the frozen weight (30) gathered as they are used, the
other parameters persistent (gathered once a step, after the optimizer)."""
ZERO_CASES: dict[str, dict[str, Any]] = {  # name -> stage, precision, zero_optimization, micro-batches a step
    **{f"{stage}-{precision}": {"stage": stage, "precision": precision, "zero": STAGE3 if stage == 3 else {}}
       for stage in (1, 2, 3) for precision in ("no", "bf16")},
    "2-bf16-accumulate": {"stage": 2, "precision": "bf16", "zero": {}, "accumulation": 2},
    "3-no-reuse": {"stage": 3, "precision": "no", "accumulation": 2,  # the embedding released in between
                   "zero": {**STAGE3, "stage3_max_reuse_distance": 40}},
}
TP_CASES = ("no", "bf16")
TP_SIZE, BATCH, SEQ = 2, 2, 8


def _all_gather_coalesced(self: counting.CountingGroup, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                          opts: Any = None) -> Any:
    """DTensor's all-gather reaches the group here, and gloo's Python binding lacks it: one gather per tensor."""
    works = []
    for output, tensor in zip(outputs, inputs):
        self._count("all_gather", [output])
        works.append(self._gloo._allgather_base(output, tensor, opts or dist.AllgatherOptions()))
    for work in works[:-1]:
        work.wait()
    return works[-1]


counting.CountingGroup.allgather_into_tensor_coalesced = _all_gather_coalesced  # type: ignore[method-assign]
counting.CountingGroup.all_gather_single_coalesced = _all_gather_coalesced  # type: ignore[method-assign]


def _records(counter: Counter) -> list[list[Any]]:
    return [[r.kind, r.bytes, list(r.ranks)] for r in counter.take()]


def run_zero(case: dict[str, Any], counter: Counter) -> dict[str, Any]:
    """One Accelerator and engine: what prepare and each of ZERO_STEPS optimizer steps handed to collectives."""
    from accel.utils import DeepSpeedPlugin

    accumulation = case.get("accumulation", 1)
    plugin = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": case["stage"], **case["zero"]},
                                           "train_micro_batch_size_per_gpu": 4})
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision=case["precision"],
                              gradient_accumulation_steps=accumulation)
    model = odd_model()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    counter.take()
    engine, optimizer = accelerator.prepare(model, optimizer)
    done: dict[str, Any] = {"prepare": _records(counter), "steps": []}
    x = torch.randint(0, 11, (4, 3), generator=torch.Generator().manual_seed(accelerator.process_index))
    for _ in range(ZERO_STEPS):
        for _ in range(accumulation):
            with accelerator.accumulate(engine):
                accelerator.backward(engine(x).float().mean())
                optimizer.step()
                optimizer.zero_grad()
        done["steps"].append(_records(counter))
    engine.destroy()
    return done


def run_tp(precision: str, counter: Counter) -> dict[str, Any]:
    """tp=2, FSDP2 over the other processes if any: what prepare and each of TP_STEPS steps handed to collectives."""
    from accel.fsdp import FullyShardedDataParallelPlugin
    from accel.parallelism_config import ParallelismConfig

    dp_shard = dist.get_world_size() // TP_SIZE
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2) if dp_shard > 1 else None
    accelerator = Accelerator(cpu=True, mixed_precision=precision, fsdp_plugin=plugin,
                              parallelism_config=ParallelismConfig(dp_shard_size=dp_shard, tp_size=TP_SIZE))
    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    counter.take()
    model, optimizer = accelerator.prepare(model, optimizer)
    done: dict[str, Any] = {"prepare": _records(counter), "steps": []}
    ids = torch.randint(0, 66, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    for _ in range(TP_STEPS):
        with accelerator.autocast():
            loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        done["steps"].append(_records(counter))
    return done


def main() -> None:
    counter = install()
    report("zero", {name: run_zero(case, counter) for name, case in ZERO_CASES.items()})
    report("tp", {precision: run_tp(precision, counter) for precision in TP_CASES})
    report("unseen", sum(group.unseen() for group in GROUPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
