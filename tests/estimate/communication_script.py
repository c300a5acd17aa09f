"""Launched by test_communication.py: train odd_model() under a layout, for each case of CASES, through a
process group that counts every collective (counting.py), and report per rank what `Accelerator()`,
`prepare` and each optimizer step handed to collectives."""

from __future__ import annotations

import sys
from typing import Any

import torch
from counting import GROUPS, Counter, install
from estimate_script import odd_model
from launching import report

from accel import Accelerator, GradientAccumulationPlugin

STEPS = 2  # DDP broadcasts its rebuilt bucket order at the second step, once
PRECISIONS = ({"precision": "no"}, {"precision": "bf16"}, {"precision": "fp16"}, {"precision": "bf16-true"})
CASES: dict[str, list[dict[str, Any]]] = {  # communication_bytes' arguments besides the model, layout and processes
    "ddp": [*PRECISIONS, {"precision": "bf16", "gradient_accumulation_steps": 2}],
    "fsdp": [*PRECISIONS, {"precision": "no", "reshard_after_forward": False},
             {"precision": "bf16", "gradient_accumulation_steps": 2},
             {"precision": "no", "gradient_accumulation_steps": 2, "sync_each_batch": True}],
    "hsdp": [{"precision": "no", "shard_size": 2}, {"precision": "bf16", "shard_size": 2},
             {"precision": "fp16", "shard_size": 2, "gradient_accumulation_steps": 2}],
}


def _records(counter: Counter) -> list[list[Any]]:
    return [[r.kind, r.bytes, list(r.ranks)] for r in counter.take()]


def run(layout: str, case: dict[str, Any], counter: Counter) -> dict[str, Any]:
    """One Accelerator for `case`: what Accelerator(), prepare and each optimizer step handed to collectives."""
    plugin = parallelism = None
    if layout in ("fsdp", "hsdp"):
        from accel.fsdp import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=case.get("reshard_after_forward", True))
    if layout == "hsdp":
        from accel.parallelism_config import ParallelismConfig

        parallelism = ParallelismConfig(dp_replicate_size=2, dp_shard_size=case["shard_size"])
    accumulation = case.get("gradient_accumulation_steps", 1)
    accelerator = Accelerator(cpu=True, mixed_precision=case["precision"], fsdp_plugin=plugin,
                              parallelism_config=parallelism, gradient_accumulation_plugin=GradientAccumulationPlugin(
                                  num_steps=accumulation, sync_each_batch=case.get("sync_each_batch", False)))
    done: dict[str, Any] = {"init": _records(counter)}
    model = odd_model()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    done["prepare"] = _records(counter)
    done["steps"] = []
    for _ in range(STEPS):
        for _ in range(accumulation):
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss = model(torch.randint(0, 11, (4, 3))).float().mean()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        done["steps"].append(_records(counter))
    return done


def main(layout: str) -> None:
    counter = install()
    report("cases", [run(layout, case, counter) for case in CASES[layout]])
    report("unseen", sum(group.unseen() for group in GROUPS))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
