"""Launched by test_zero.py: for each case named on the command line, train odd_model under DeepSpeed ZeRO through the
Accelerator and report what each rank holds at the optimizer step and after it (zero_held_bytes), and the estimate.

One process runs every case, an Accelerator and engine each (DeepSpeed allows it: ds_train_script.py does too).
"""

from __future__ import annotations

import dataclasses
import gc
import sys
from typing import Any

import torch
from estimate_script import odd_model
from launching import report

from accel import Accelerator
from accel.estimate.measure import storage_bytes
from accel.estimate.zero import BOOKKEEPING, zero_bytes, zero_held_bytes
from accel.utils import DeepSpeedPlugin

STAGE3 = {"reduce_bucket_size": 64, "stage3_param_persistence_threshold": 20}
"""Stage 3 options the tests use: a small kept IPG bucket (DeepSpeed's default is 500M elements), and the two larger
weights (66 and 30 elements) partitioned only, the others also kept gathered."""
CASES: dict[str, dict[str, Any]] = {
    **{f"{stage}-{precision}": {"stage": stage, "precision": precision}
       for stage in (1, 2) for precision in ("no", "bf16", "fp16")},
    **{f"3-{precision}": {"stage": 3, "precision": precision, "zero": STAGE3} for precision in ("no", "bf16", "fp16")},
    "1-bf16-offload": {"stage": 1, "precision": "bf16", "offload_optimizer": True},
    "2-no-offload": {"stage": 2, "precision": "no", "offload_optimizer": True},
    "3-bf16-offload": {"stage": 3, "precision": "bf16", "offload_optimizer": True, "offload_param": True,
                       "zero": STAGE3},
    "3-no-subgroups": {"stage": 3, "precision": "no",  # 3 sub-groups; at most 30 elements kept gathered
                       "zero": {**STAGE3, "sub_group_size": 40, "stage3_model_persistence_threshold": 30}},
}
ESTIMATE_KEYS = {"reduce_bucket_size": "reduce_bucket_size", "sub_group_size": "sub_group_size",
                 "stage3_param_persistence_threshold": "param_persistence_threshold",
                 "stage3_model_persistence_threshold": "model_persistence_threshold"}


def live_storages() -> dict[int, int]:
    """Every tensor storage this process's Python objects reach (tensors and their gradients): data_ptr -> bytes."""
    found = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and obj.device.type == "cpu":
            for tensor in (obj, obj.grad if obj.is_leaf else None):
                if tensor is not None and tensor.untyped_storage().nbytes():
                    found[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return found


def run(name: str, live: bool) -> None:
    """Train case `name` one step, then hold its gradients (a second backward) and report what is held, there and
    after the engine's step, with the estimate; `live`: also every storage the process holds that is new since the
    case began, less the input and DeepSpeed's bookkeeping scalars (zero_held_bytes finds everything it holds)."""
    case = CASES[name]
    if live:
        gc.collect()
    before = live_storages() if live else {}
    zero = {"stage": case["stage"], **case.get("zero", {})}
    plugin = DeepSpeedPlugin(
        hf_ds_config={"zero_optimization": zero, "train_micro_batch_size_per_gpu": 4},
        offload_optimizer_device="cpu" if case.get("offload_optimizer") else None,
        offload_param_device="cpu" if case.get("offload_param") else None,
    )
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision=case["precision"])
    model = odd_model()
    options = {ESTIMATE_KEYS[key]: value for key, value in case.get("zero", {}).items()}
    estimate = [zero_bytes(model, case["precision"], case["stage"], accelerator.num_processes, "adamw",
                           case.get("offload_optimizer", False), case.get("offload_param", False),
                           phase=phase, **options)[accelerator.process_index] for phase in ("step", "after-step")]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    engine, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randint(0, 11, (4, 3), generator=torch.Generator().manual_seed(accelerator.process_index))
    for _ in range(30):  # fp16: steps the loss scale overflows are skipped and make no optimizer state
        accelerator.backward(engine(x).float().sum())
        if engine.optimizer.optimizer.state:
            break
    engine.set_gradient_accumulation_boundary(is_boundary=True)
    engine.backward(engine(x).float().sum())  # accelerator.backward's first half: the engine holds the gradients
    held = [zero_held_bytes(engine, optimizer)]
    assert zero_held_bytes(engine) == zero_held_bytes(engine, engine.optimizer) == held[0]  # any way to name it
    results: dict[str, Any] = {}
    if live:
        gc.collect()  # garbage in reference cycles is not held
        new = sum(size for pointer, size in live_storages().items() if pointer not in before)
        zero_optimizer = engine.optimizer
        scalars = [getattr(zero_optimizer, key, None) for key in BOOKKEEPING]
        bookkeeping = storage_bytes([t for value in scalars for t in (value.values() if isinstance(value, dict)
                                                                      else [value]) if isinstance(t, torch.Tensor)])
        results["live"] = new - storage_bytes([x]) - bookkeeping
    engine.step()
    held.append(zero_held_bytes(engine, optimizer))
    results |= {"held": [dataclasses.astuple(h) for h in held], "estimate": [dataclasses.astuple(e) for e in estimate]}
    report(name, results)
    engine.destroy()


if __name__ == "__main__":
    for case_name in sys.argv[1:]:  # "live:NAME": with the live check
        run(case_name.removeprefix("live:"), case_name.startswith("live:"))
