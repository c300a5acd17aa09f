"""Launched by test_health.py on 2 processes: FP8 health under DDP reports from the main process only.

    health_ddp_script.py PROJECT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "distributed" / "two_processes"))

import torch  # noqa: E402
from launching import report  # noqa: E402
from torch import nn  # noqa: E402

from accel import Accelerator, FP8RecipeKwargs  # noqa: E402

recipe = FP8RecipeKwargs(backend="native", base_precision="fp32", health_interval=2)
accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[recipe], log_with="jsonl", project_dir=sys.argv[1])
accelerator.init_trackers("run")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1e-3))
counted = []
for step in range(4):
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(step * 2 + accelerator.process_index))
    accelerator.backward(model(x).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()
    counted.append(any(s.has_counts for s in accelerator.precision.scalers.scalers.values()))
accelerator.end_training()
report("wrapped", "optimizer_step" in vars(accelerator.precision))
report("counted", counted)
