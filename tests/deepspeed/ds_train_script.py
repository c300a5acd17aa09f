"""Launched with 2 processes by test_deepspeed_training.py: train the tiny model through Accelerator(deepspeed_plugin=...)
at each ZeRO stage given on the command line, and report losses, rows seen, weights and optimizer bytes per process."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from ds_tiny import LR, MICRO, dataset, make_model
from launching import report
from torch import nn

from accel import Accelerator
from accel.utils import DeepSpeedPlugin

CASES = {
    "zero1": {"zero_stage": 1},
    "zero2": {"zero_stage": 2},
    "zero3": {"zero_stage": 3, "zero3_save_16bit_model": True},
    "zero2_offload": {"zero_stage": 2, "offload_optimizer_device": "cpu"},
    "zero3_offload": {"zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu"},
    "zero2_clip": {"zero_stage": 2, "gradient_clipping": 0.05},
    "zero2_bf16": {"zero_stage": 2},
    "zero2_accumulate": {"zero_stage": 2},
}


def optimizer_bytes(optimizer: object) -> int:
    """Bytes of AdamW's state (exp_avg, exp_avg_sq) this process holds, in DeepSpeed's inner torch optimizer."""
    inner = getattr(optimizer, "optimizer", optimizer)
    return sum(t.numel() * t.element_size() for state in inner.state.values() for t in state.values()
               if isinstance(t, torch.Tensor) and t.dim() > 0)


def run(case: str, epochs: int = 2) -> None:
    precision = "bf16" if case.endswith("bf16") else None
    plugin = None if case == "launched" else DeepSpeedPlugin(**CASES[case])  # launched: from accel launch's variables
    steps = 2 if case.endswith("accumulate") else None
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision=precision, gradient_accumulation_steps=steps)
    report(f"{case}_stage", accelerator.state.deepspeed_plugin.zero_stage)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = torch.utils.data.DataLoader(dataset(), batch_size=MICRO)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses, rows = [], []
    for _ in range(epochs):
        for index, x, y in loader:
            dtype = next(model.parameters()).dtype  # DeepSpeed's bf16 runs the model's weights in bf16
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x.to(dtype)).float(), y)
                accelerator.backward(loss)
            if "clip" in case:
                report(f"{case}_norm", float(accelerator.clip_grad_norm_(model.parameters(), 0.05)))
            optimizer.step()
            optimizer.zero_grad()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / 2)
            rows += index.tolist()
    report(f"{case}_losses", losses)
    report(f"{case}_rows", rows)
    report(f"{case}_bytes", optimizer_bytes(optimizer.optimizer))
    report(f"{case}_type", [accelerator.distributed_type.value, accelerator.mixed_precision, type(model).__name__,
                            str(next(model.parameters()).dtype)])
    weights = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        report(f"{case}_weights", {k: v.float().tolist() for k, v in weights.items()})
    report(f"{case}_unwrapped", type(accelerator.unwrap_model(model)).__name__)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        run(name)
