"""Builds an Accelerator with no fsdp_plugin and no handlers in code, prepares a tiny model, and prints
one JSON line per process: the plugin the Accelerator built from ACCEL_* (or null), whether the model
came back sharded, and the quantization mode (or null)."""

import dataclasses
import json
import os

import torch

from accel import Accelerator
from accel.fsdp import is_sharded

accelerator = Accelerator()
plugin = accelerator.fsdp_plugin
fields = None if plugin is None else {
    f.name: getattr(plugin, f.name) for f in dataclasses.fields(plugin) if f.repr and f.name != "mixed_precision_policy"
}
quantizer = accelerator.quantizer
report = {
    "rank": accelerator.process_index,
    "plugin": fields,
    "distributed_type": accelerator.distributed_type.value,
    "bnb": None if quantizer is None else {
        **dataclasses.asdict(quantizer.options), "dtype": str(quantizer.options.dtype)
    },
}


class Block(torch.nn.Linear):
    """A 'transformer block' for fsdp_transformer_layer_cls_to_wrap: Block."""


if quantizer is None:
    model = torch.nn.Sequential(Block(8, 8), torch.nn.ReLU(), Block(8, 2))
    model = accelerator.prepare(model)
    report["sharded"] = is_sharded(model)
os.write(1, ("SHARDING " + json.dumps(report, default=list) + "\n").encode())  # one write: ranks share the pipe
