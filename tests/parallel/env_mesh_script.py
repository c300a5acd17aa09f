"""Launched by `accel launch --config_file <Accelerate config with parallelism_config>`: the Accelerator built
without keywords takes its layout from the environment; report the mesh and the parameters' placements."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "distributed" / "two_processes"))

from launching import report  # noqa: E402
from torch import nn  # noqa: E402

from accel import Accelerator  # noqa: E402

accelerator = Accelerator()
mesh = accelerator.torch_device_mesh
report("mesh", [list(mesh.mesh_dim_names), list(mesh.shape)])
model = nn.Linear(4, 4)
model, _ = accelerator.prepare(model, __import__("torch").optim.SGD(model.parameters(), lr=0.1))
report("placements", str(model.weight.placements))
