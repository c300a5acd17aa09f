"""Training with DDP, run by test_training.py under `accel launch --num_processes 2 --cpu`.

    training_script.py PRECISION [PRECISION ...]

For each precision, one Accelerator after another in the same process (the process group is
reused): two epochs of a small MLP with gradient accumulation 2 on a shuffled, sharded loader.
Each rank reports its final parameters, whether its gradients differed from the other rank's on
the micro-batches that do not sync (they must: no all-reduce there) and matched on those that do.
`train` is also called in one process by the test, with twice the batch, as the reference.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from launching import report

SAMPLES = 64
WIDTH = 16


def train(precision: str, batch_size: int, check_sync: bool = False) -> tuple[list[float], dict[str, list[Any]]]:
    """Train; return the final weights (flattened) and what was observed: per kind of micro-batch whether
    the ranks' gradients agreed, how far the weights moved, whether DDP wraps the model, the weights' names."""
    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 32), nn.ReLU(), nn.Linear(32, WIDTH))
    x = torch.randn(SAMPLES, WIDTH)
    y = torch.sin(x)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # A seeded generator decides the order, the same one in 1 and 2 processes (without one, two processes
    # give the sampler a generator seeded from the global RNG, as Accelerate does, and the orders differ).
    order = torch.Generator().manual_seed(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=order)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    initial = _weights(accelerator, model)
    agreed: dict[str, list[Any]] = {"sync": [], "no_sync": []}
    for _ in range(2):
        for inputs, targets in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(inputs).float(), targets)
                accelerator.backward(loss)
                if check_sync and precision != "fp8":  # FP8 O1 keeps weight gradients outside param.grad
                    agreed["sync" if accelerator.sync_gradients else "no_sync"].append(_same_everywhere(accelerator, model))
                optimizer.step()
                optimizer.zero_grad()
    parameters = _weights(accelerator, model)
    agreed["moved"] = [float((parameters - initial).abs().max())]
    agreed["wrapped"] = [type(model).__name__ == "DistributedDataParallel"]
    agreed["names"] = list(accelerator.get_state_dict(model))
    return parameters.tolist(), agreed


def _weights(accelerator: Accelerator, model: nn.Module) -> torch.Tensor:
    """The real weights (a backend may store them scaled), flattened, in float32."""
    return torch.cat([t.detach().float().reshape(-1) for t in accelerator.get_state_dict(model).values()])


def _same_everywhere(accelerator: Accelerator, model: nn.Module) -> bool:
    gradient = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]).float()
    both = accelerator.gather(gradient[None])
    return bool(torch.equal(both[0], both[1]))


def main(precisions: list[str]) -> None:
    for precision in precisions:
        parameters, agreed = train(precision, batch_size=4, check_sync=True)
        report(f"parameters_{precision}", parameters)
        report(f"agreed_{precision}", agreed)


if __name__ == "__main__":
    main(sys.argv[1:])
