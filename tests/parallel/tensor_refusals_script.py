"""Launched on 2 processes by test_tensor_refusals.py: each bad input refused with its message, reported by name.

At construction: an FP8 precision, bitsandbytes, a mesh without 'tp', 'dp_replicate' without 'dp_shard', a mesh
that does not hold every process. At prepare: a tp size a layer's dimension (or the attention heads) does not
divide, a model without a plan; after such a refusal the model is left unsplit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from launching import report
from tensor_tiny import make_llama
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from accel import Accelerator
from accel.backends.registry import create_backend
from accel.kwargs_handlers import BitsandbytesKwargs, FP8RecipeKwargs, collect_handlers
from accel.parallel.tensor_strategy import TensorParallelStrategy

accelerator = Accelerator(cpu=True)
state, precision, handlers = accelerator.process_state, accelerator.precision, accelerator.handlers
mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp_shard", "tp"))


def refused(name: str, attempt: Callable[[], object]) -> None:
    try:
        attempt()
    except ValueError as error:
        report(name, str(error))
    else:
        report(name, None)


fp8_handlers = collect_handlers([FP8RecipeKwargs(backend="native")], None)
fp8 = create_backend("fp8", state.device, fp8_handlers)
refused("fp8", lambda: TensorParallelStrategy(state, fp8, fp8_handlers, mesh))
bnb_handlers = collect_handlers([BitsandbytesKwargs(mode="nf4")], None)
refused("bnb", lambda: TensorParallelStrategy(state, precision, bnb_handlers, mesh))
data_only = init_device_mesh("cpu", (2,), mesh_dim_names=("dp_shard",))
refused("no_tp", lambda: TensorParallelStrategy(state, precision, handlers, data_only))
replicate_only = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp_replicate", "tp"))
refused("replicate_only", lambda: TensorParallelStrategy(state, precision, handlers, replicate_only))
refused("mesh_size", lambda: TensorParallelStrategy(replace(state, num_processes=4), precision, handlers, mesh))

accelerator.strategy = TensorParallelStrategy(state, precision, handlers, mesh, None, {"0": "colwise", "2": "rowwise"})
odd = nn.Sequential(nn.Linear(8, 15), nn.ReLU(), nn.Linear(15, 8))
refused("indivisible", lambda: accelerator.prepare(odd))
report("left_whole", all(type(p) is nn.Parameter for p in odd.parameters()))
accelerator.strategy = TensorParallelStrategy(state, precision, handlers, mesh)
refused("no_plan", lambda: accelerator.prepare(nn.Sequential(nn.Linear(8, 8))))
refused("heads", lambda: accelerator.prepare(make_llama(kv_heads=1)))
report("prepared", len(accelerator.prepared.models))
torch.distributed.barrier()
accelerator.end_training()
