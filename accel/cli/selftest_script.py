"""The training check `accel test` launches: a tiny regression model, about 50 steps.

Prints one line per check (it trains; the loss decreases; the precision asked is the one that
runs) and a final verdict; exits 1 when a check fails. Fast on a CPU in every precision.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accel import Accelerator

STEPS = 50


def train(steps: int) -> tuple[Accelerator, list[float], float]:
    """Fit y = X w with a two-layer MLP under an Accelerator built from the environment."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator

    torch.manual_seed(0)
    inputs = torch.randn(512, 16)
    targets = inputs @ torch.randn(16, 1)
    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    # eps=1e-8 (the default) rounds to 0 in fp16, and a unit whose gradient is 0 would get 0/0 under 16-true.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-6)
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=64, shuffle=True)
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
    return accelerator, losses, time.perf_counter() - start


def report(check: str, passed: bool, detail: str) -> bool:
    """Print one check's line; returns `passed`."""
    rank = os.environ.get("RANK")
    prefix = f"[rank {rank}] " if rank is not None and os.environ.get("WORLD_SIZE", "1") != "1" else ""
    print(f"{prefix}{'ok  ' if passed else 'FAIL'}  {check}: {detail}", flush=True)
    return passed


def main() -> int:
    """Run the checks; 0 when all pass, else 1."""
    from accel.settings import MIXED_PRECISION

    asked = MIXED_PRECISION.from_env()
    try:
        accelerator, losses, seconds = train(STEPS)
    except Exception as error:  # the check reports any failure to train as its result
        reason = str(error).split("\n")[0]
        report("it trains", False, f"{type(error).__name__}: {reason}")
        return verdict(False)
    finite = all(loss == loss and abs(loss) != float("inf") for loss in losses)
    passed = report("it trains", finite, f"{len(losses)} steps in {seconds:.1f} s on {accelerator.device}")
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    passed &= report("loss decreases", last < 0.5 * first, f"{first:.4f} -> {last:.4f} (mean of the first and last 5)")
    runs = accelerator.mixed_precision
    passed &= report("precision", runs == asked, f"asked {asked!r}, runs {runs!r}")
    return verdict(passed)


def verdict(passed: bool) -> int:
    """Print the final line; the exit status."""
    print(f"accel test: {'PASS' if passed else 'FAIL'}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
