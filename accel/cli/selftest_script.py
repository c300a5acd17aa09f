"""The training check `accel test` launches: a tiny regression model, about 50 steps.

The model has the structure a config can name: repeated residual blocks whose class is `Block`
(listed in the model's `_no_split_modules`, as transformers models list theirs), or, when the
config wraps transformer blocks by class name (fsdp_transformer_layer_cls_to_wrap), classes of
exactly those names, so that every FSDP wrap policy the wizard offers has units to shard.

Prints one line per check (it trains; the loss decreases; the precision asked is the one that
runs) and a final verdict; exits 1 when a check fails. Fast on a CPU in every precision.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from accel import Accelerator

STEPS = 50


def train(steps: int) -> tuple[Accelerator, torch.nn.Module, list[float], float]:
    """Fit y = X w with the residual-block model under an Accelerator built from the environment."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator

    torch.manual_seed(0)
    inputs = torch.randn(512, 16)
    targets = inputs @ torch.randn(16, 1)
    accelerator = Accelerator()
    model = build_model(block_class_names(), adapters=quantized())
    if quantized():  # the optimizer over what trains after prepare, as a QLoRA script builds it
        model = accelerator.prepare(model)
    # eps=1e-8 (the default) rounds to 0 in fp16, and a unit whose gradient is 0 would get 0/0 under 16-true.
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2, eps=1e-6)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=64, shuffle=True)
    if quantized():
        optimizer, loader = accelerator.prepare(optimizer, loader)
    else:  # together, as DeepSpeed needs them
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses: list[float] = []
    start = time.perf_counter()
    while len(losses) < steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return accelerator, model, losses, time.perf_counter() - start


def block_class_names() -> list[str]:
    """The block classes the config wraps by name, else ["Block"]."""
    from accel.settings import FSDP_SETTINGS_BY_KEY

    names = FSDP_SETTINGS_BY_KEY["fsdp_transformer_layer_cls_to_wrap"].from_env()
    return list(names) if names else ["Block"]


def quantized() -> bool:
    """Whether the config quantizes the Linear layers with bitsandbytes (bnb_config, ACCEL_BNB_MODE)."""
    from accel.settings import BNB_SETTINGS_BY_KEY

    return BNB_SETTINGS_BY_KEY["mode"].env_var in os.environ


def build_model(block_names: list[str], adapters: bool = False) -> torch.nn.Module:
    """16 inputs -> 32 features -> two residual MLP blocks per name (classes of that name) -> 1 output.

    With `adapters`, each block also has a rank-4 low-rank adapter (two plain parameters, the second
    zero, as LoRA starts) beside its MLP: what trains when bitsandbytes freezes the Linear weights.
    """
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.act, self.proj = nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)
            self.down = nn.Parameter(torch.randn(32, 4) / 32**0.5) if adapters else None
            self.up = nn.Parameter(torch.zeros(4, 32)) if adapters else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x + self.proj(self.act(self.fc(x)))
            return y if self.down is None or self.up is None else y + (x @ self.down.to(x.dtype)) @ self.up.to(x.dtype)

    class SelfTestModel(nn.Module):
        _no_split_modules = block_names
        # tensor parallelism (parallelism_config_tp_size): each block's MLP split as transformers splits one
        tp_plan = {"blocks.*.fc": "colwise", "blocks.*.proj": "rowwise"}

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(16, 32)
            self.blocks = nn.ModuleList(type(name, (Block,), {})() for name in block_names for _ in range(2))
            self.head = nn.Linear(32, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.embed(x)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return SelfTestModel()


def report(check: str, passed: bool, detail: str) -> bool:
    """Print one check's line; returns `passed`."""
    rank = os.environ.get("RANK")
    prefix = f"[rank {rank}] " if rank is not None and os.environ.get("WORLD_SIZE", "1") != "1" else ""
    say(f"{prefix}{'ok  ' if passed else 'FAIL'}  {check}: {detail}")
    return passed


def main() -> int:
    """Run the checks; 0 when all pass, else 1."""
    from accel.settings import MIXED_PRECISION

    asked = MIXED_PRECISION.from_env()
    try:
        accelerator, model, losses, seconds = train(STEPS)
    except Exception as error:  # the check reports any failure to train as its result
        reason = str(error).split("\n")[0]
        report("it trains", False, f"{type(error).__name__}: {reason}")
        return verdict(False, alone=True)
    finite = all(loss == loss and abs(loss) != float("inf") for loss in losses)
    passed = report("it trains", finite, f"{len(losses)} steps in {seconds:.1f} s on {accelerator.device}")
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    passed &= report("loss decreases", last < 0.5 * first, f"{first:.4f} -> {last:.4f} (mean of the first and last 5)")
    if accelerator.is_fsdp2:
        passed &= report_units(model)
    runs = accelerator.mixed_precision
    passed &= report("precision", runs == asked, f"asked {asked!r}, runs {runs!r}")
    return verdict(all_passed(accelerator, passed))


def report_units(model: torch.nn.Module) -> bool:
    """Under FSDP2: the sharded units (a wrap policy that matched nothing leaves only the root)."""
    from torch.distributed.fsdp import FSDPModule

    units = [type(module).__name__.removeprefix("FSDP") for module in model.modules() if isinstance(module, FSDPModule)]
    blocks = len(units) - 1
    detail = f"FSDP2, {len(units)} unit(s): the root and {blocks} block(s) ({', '.join(sorted(set(units[1:]))) or '-'})"
    return report("sharding", len(units) >= 1, detail)


def say(line: str) -> None:
    """Print `line` in one write: the processes share one terminal, and print's separate writes of the text
    and the newline let another process's line land in between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def all_passed(accelerator: Accelerator, passed: bool) -> bool:
    """Whether every process passed its checks (one small reduction; each process's own result in one)."""
    import torch

    if accelerator.num_processes == 1:
        return passed
    try:
        failed = accelerator.reduce(torch.tensor([0 if passed else 1], device=accelerator.device), "sum")
    except RuntimeError:  # another process left before it: its failure is what it printed
        return False
    return int(failed.item()) == 0


def verdict(passed: bool, alone: bool = False) -> int:
    """Print the final line, once: from the main process, which speaks for all (`passed` is every process's
    result), or from a process whose run failed on its own (`alone`: the others may never get this far);
    the exit status."""
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0 or alone:
        prefix = f"[rank {rank}] " if alone and os.environ.get("WORLD_SIZE", "1") != "1" else ""
        say(f"{prefix}accel test: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
