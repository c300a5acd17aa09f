"""Activation checkpointing and regional compilation over 2 real processes, run by test_blocks.py under
`accel launch --num_processes 2 --cpu`: `blocks_script.py ddp` (DDP: eager, checkpointed, checkpointed and
regionally compiled) or `blocks_script.py fsdp` (FSDP2 sharding each Block, with its
fsdp_activation_checkpointing and regional compilation; each block's all-gathers counted; then with
fsdp_activation_checkpointing_offload, eager)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: tiny_transformer

from launching import report  # noqa: E402
from tiny_transformer import make_transformer, train  # noqa: E402
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup  # noqa: E402

from accel import Accelerator  # noqa: E402
from accel.utils import FullyShardedDataParallelPlugin, TorchDynamoPlugin  # noqa: E402

REGIONAL = TorchDynamoPlugin(backend="aot_eager", use_regional_compilation=True)


def run(label: str, **options: Any) -> Any:
    accelerator = Accelerator(cpu=True, **options)
    result = train(accelerator, make_transformer())
    report(label, {key: result[key] for key in ("losses", "saved_bytes", "gradients", "weights")})
    model = accelerator.unwrap_model(result["model"])
    report(f"{label}_compiled", [block._compiled_call_impl is not None for block in model.blocks])
    return model


if sys.argv[1] == "ddp":
    run("ddp")
    run("ddp_checkpointed", activation_checkpointing=True)
    run("ddp_regional", activation_checkpointing=True, dynamo_plugin=REGIONAL)
else:
    unshards: Counter[int] = Counter()
    original = FSDPParamGroup.unshard

    def counted(self: FSDPParamGroup, *args: Any, **kwargs: Any) -> Any:
        unshards[id(self)] += 1
        return original(self, *args, **kwargs)

    FSDPParamGroup.unshard = counted  # type: ignore[method-assign]
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", activation_checkpointing=True,
                                            transformer_cls_names_to_wrap=["Block"])
    model = run("fsdp_regional", fsdp_plugin=plugin, dynamo_plugin=REGIONAL)
    groups = [module._get_fsdp_state()._fsdp_param_group for module in (*model.blocks, model)]
    report("fsdp_unshards", [unshards[id(group)] for group in groups])  # blocks, then the root
    report("fsdp_sharded", [type(block.up.weight).__name__ for block in model.blocks])
    offloaded = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", activation_checkpointing=True,
                                               activation_checkpointing_offload=True, transformer_cls_names_to_wrap=["Block"])
    run("fsdp_offloaded", fsdp_plugin=offloaded)
