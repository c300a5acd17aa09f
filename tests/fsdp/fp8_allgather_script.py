"""Launched on 2 processes by test_fp8_allgather.py: the native FP8 backend under FSDP2 with and
without fp8_params (weights all-gathered in FP8, or in the base precision and cast per GEMM), what
travels through the all-gathers, the bytes each process holds, and a save_state/load_state resume.

argv: a folder both processes can write the checkpoint to.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from launching import report
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.native_fp8 import Float8Linear, cast_to_fp8
from accel.utils import FullyShardedDataParallelPlugin

STEPS = 4
WIDTH, HIDDEN, BATCH = 64, 256, 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, WIDTH)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_model() -> Net:
    torch.manual_seed(0)
    return Net()


def batch(step: int, rank: int = 0, world: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s global batch, or process `rank`'s half of it."""
    generator = torch.Generator().manual_seed(100 + step)
    x, y = torch.randn(BATCH, 16, generator=generator), torch.randn(BATCH, 4, generator=generator)
    part = BATCH // world
    return x[rank * part:(rank + 1) * part], y[rank * part:(rank + 1) * part]


class Traffic:
    """Bytes received through torch.distributed.all_gather_single (what FSDP2 all-gathers with), by dtype."""

    def __init__(self) -> None:
        self.received: dict[str, int] = {}
        self.largest = 0
        self._original = dist.all_gather_single

    @contextmanager
    def recording(self) -> Iterator[None]:
        def recorded(output: torch.Tensor, input: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            size = output.numel() * output.element_size()
            self.received[str(output.dtype)] = self.received.get(str(output.dtype), 0) + size
            self.largest = max(self.largest, size)
            return self._original(output, input, *args, **kwargs)

        dist.all_gather_single = recorded
        try:
            yield
        finally:
            dist.all_gather_single = self._original


def prepared(base: str, fp8_params: bool, scaling: str = "delayed") -> tuple[Accelerator, nn.Module, torch.optim.Optimizer]:
    recipe = FP8RecipeKwargs(backend="native", base_precision=base, fp8_params=fp8_params, scaling=scaling)
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"])
    accelerator = Accelerator(cpu=True, mixed_precision="fp8", kwarg_handlers=[recipe], fsdp_plugin=plugin)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def step(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, index: int) -> float:
    x, y = batch(index, accelerator.process_index, accelerator.num_processes)
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    return accelerator.reduce(loss.detach(), "mean").item()


def parameter_bytes(model: nn.Module) -> dict[str, int]:
    """What this process holds between steps: the master shards and the FP8 shards of fp8_params."""
    masters = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    fp8 = sum(m.fp8_weight.nbytes for m in model.modules() if isinstance(m, Float8Linear) and m.fp8_weight is not None)
    return {"masters": masters, "fp8": fp8, "values": sum(p.numel() for p in model.parameters())}


def train(tag: str, base: str, fp8_params: bool, scaling: str = "delayed") -> None:
    accelerator, model, optimizer = prepared(base, fp8_params, scaling)
    seen: list[str] = []
    layer = model.blocks[0].up
    layer.register_forward_pre_hook(
        lambda m, _: seen.append(f"{type(m.weight).__name__}:{getattr(m.weight, '_data', m.weight).dtype}")
    )
    traffic = Traffic()
    losses = []
    for index in range(STEPS):
        if index == 1:  # a step after the first (whose casts need their own all-reduces)
            with traffic.recording():
                losses.append(step(accelerator, model, optimizer, index))
        else:
            losses.append(step(accelerator, model, optimizer, index))
    captured: dict[str, torch.Tensor] = {}
    if fp8_params:
        layer.register_forward_pre_hook(lambda m, _: captured.update(gathered=m.weight._data.view(torch.uint8).clone()))
    model.eval()  # FP8 off in evaluation: the FP8-gathered weights are used dequantized
    x, y = batch(0, accelerator.process_index, accelerator.num_processes)
    with torch.no_grad():
        report(f"{tag}_eval", accelerator.reduce(torch.nn.functional.mse_loss(model(x).float(), y), "mean").item())
    full = accelerator.get_state_dict(model)
    if accelerator.is_main_process and fp8_params:  # the gathered bytes are the one-process cast of the whole master
        scaler = layer.weight_scaler
        whole = cast_to_fp8(full["blocks.0.up.weight"], scaler.scale, scaler.dtype).view(torch.uint8)
        report(f"{tag}_gathered_is_whole_cast", torch.equal(whole, captured["gathered"]))
    report(f"{tag}_losses", losses)
    report(f"{tag}_gathered", sorted(set(seen)))
    report(f"{tag}_traffic", traffic.received)
    report(f"{tag}_largest_gather", traffic.largest)
    report(f"{tag}_bytes", parameter_bytes(model))
    report(f"{tag}_describe", accelerator.precision.describe())
    if accelerator.is_main_process:
        report(f"{tag}_weights", {name: t.float().reshape(-1).tolist() for name, t in full.items()})
        report(f"{tag}_state_types", sorted({type(t).__name__ for t in model.state_dict().values()}))
    accelerator.end_training()


def resume(folder: str) -> None:
    """Train 2 steps, save, train 2 more; then a fresh Accelerator loads and trains the same 2."""
    accelerator, model, optimizer = prepared("fp32", True)
    for index in range(2):
        step(accelerator, model, optimizer, index)
    accelerator.save_state(folder)
    report("straight", [step(accelerator, model, optimizer, index) for index in range(2, 4)])
    accelerator.end_training()
    accelerator, model, optimizer = prepared("fp32", True)
    accelerator.load_state(folder)
    report("resumed", [step(accelerator, model, optimizer, index) for index in range(2, 4)])
    accelerator.end_training()


if __name__ == "__main__":
    train("fp8", "fp32", fp8_params=True)
    train("hp", "fp32", fp8_params=False)
    train("fp8_bf16", "bf16", fp8_params=True)
    train("bf16", "bf16", fp8_params=False)
    train("fp8_current", "fp32", fp8_params=True, scaling="current")
    train("hp_current", "fp32", fp8_params=False, scaling="current")
    resume(sys.argv[1])
