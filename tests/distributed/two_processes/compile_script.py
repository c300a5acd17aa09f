"""training_script.train with every model compiled (aot_eager) over DDP, run by test_compile.py under
`accel launch --num_processes 2 --cpu`: `compile_script.py PRECISION [PRECISION ...]`. The backend comes
from ACCEL_DYNAMO_BACKEND, as `accel launch --dynamo_backend` passes it."""

from __future__ import annotations

import os
import sys

os.environ["ACCEL_DYNAMO_BACKEND"] = "aot_eager"

from torch._dynamo.utils import counters  # noqa: E402

from launching import report  # noqa: E402
from training_script import train  # noqa: E402

for precision in sys.argv[1:]:
    parameters, agreed = train(precision, batch_size=4, check_sync=True)
    report(f"parameters_{precision}", parameters)
    report(f"agreed_{precision}", agreed)
report("compiled_frames", counters["frames"]["ok"])

from torch import nn  # noqa: E402

from accel import Accelerator  # noqa: E402

accelerator = Accelerator()
model = accelerator.prepare(nn.Linear(4, 4))
kept = accelerator.unwrap_model(model)
report("unwrapped", [type(model).__name__, type(model._orig_mod).__name__, type(kept).__name__,
                     type(kept._orig_mod).__name__, type(accelerator.unwrap_model(model, keep_torch_compile=False)).__name__])

import torch  # noqa: E402

from accel.utils import FullyShardedDataParallelPlugin  # noqa: E402

accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = accelerator.prepare(model)  # sharded, then compiled
optimizer = accelerator.prepare(optimizer)  # built before prepare, prepared after the model: follows the shards
sharded = list(accelerator.unwrap_model(model, keep_torch_compile=False).parameters())
report("fsdp_optimizer_follows", [all(p is q for p, q in zip(optimizer.param_groups[0]["params"], sharded, strict=True)),
                                  type(model).__name__])
