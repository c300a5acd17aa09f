"""Throughput and loss-spike detection on 2 processes, run by test_monitoring.py under `accel launch`.

Arguments: the spike action ("log", "checkpoint", "stop", or "settings": no handler, the launcher's settings
decide) and the project folder. Only rank 1's loss
spikes (x200 at step SPIKE_STEP); the detector judges the loss averaged over the processes, so both
ranks must find the spike at the same step and act together. Each rank reports what it saw.
"""

from __future__ import annotations

import sys

import torch
from launching import report
from torch import nn

from accel import Accelerator, LossSpikeError, SpikeDetectionKwargs, ThroughputKwargs

SPIKE_STEP, STEPS, BATCH = 40, 50, 16


def main() -> None:
    action, project = sys.argv[1], sys.argv[2]
    # "settings": the monitors come from `accel launch --spike_detection ... --log_throughput true` alone
    handlers: list = []
    if action != "settings":
        handlers = [SpikeDetectionKwargs(action=action), ThroughputKwargs(log_every=5, peak_flops=1e9)]
    accelerator = Accelerator(project_dir=project, kwarg_handlers=handlers)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))
    generator = torch.Generator().manual_seed(1 + accelerator.process_index)
    stopped_at = None
    try:
        for step in range(STEPS):
            x = torch.randn(BATCH, 8, generator=generator)
            y = x.sum(dim=1, keepdim=True) + 0.3 * torch.randn(BATCH, 1, generator=generator)
            loss = (model(x) - y).square().mean()
            if step == SPIKE_STEP and accelerator.process_index == 1:
                loss = loss + 199 * loss.detach()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    except LossSpikeError:
        stopped_at = step
    detector = accelerator.spike_detector
    assert detector is not None
    report("spikes", [spike.step for spike in detector.spikes])
    report("stopped_at", stopped_at)
    report("throughput", accelerator.throughput)
    report("flops_per_sample", accelerator.throughput_monitor.flops_per_sample if accelerator.throughput_monitor else None)
    accelerator.end_training()


if __name__ == "__main__":
    main()
