"""Each rank's bytes for a layout: the one entry point over the rules of each layout.

DDP, FSDP2 and HSDP follow training.py's formulas (every rank computed); DeepSpeed ZeRO follows zero.py's
(at the optimizer step, the gradients held; what offload keeps on the host in `RankBytes.host`);
a layout with tensor parallelism is planned with torch's and accel's real sharding code on the fake
process group (plan.py), for its first and last rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from torch import nn

from accel.estimate.layout import Layout
from accel.estimate.training import RankBytes, training_bytes


def estimate_ranks(
    build: Callable[[], nn.Module], layout: Layout, precision: str, optimizer: str = "adamw", device: str = "cuda",
) -> list[RankBytes]:
    """What the ranks of `layout` hold to train the model `build` makes on the meta device.

    Args:
        build: makes the model on the meta device (called once, or once per planned rank).
        layout: the processes and how they hold the model (layout.py).
        precision: training.py's precision name ("no", "bf16", "fp8-native-O1", ...).
        optimizer: "adamw", "adam", "sgd" or "sgd-momentum".
        device: "cuda" or "cpu": which layers native FP8 converts depends on it.

    Returns:
        RankBytes of every rank (formulas), or of the ranks planned (tensor parallelism), in rank order.

    Example:
        >>> from accel.estimate.models import build_on_meta
        >>> ranks = estimate_ranks(lambda: build_on_meta("gpt"), Layout(4, "fsdp", {"dp_shard": 4}), "bf16")
        >>> len(ranks), ranks[0].parameters == ranks[0].gradients
        (4, True)
    """
    if layout.quantization and layout.kind in ("tp", "zero"):
        raise ValueError(f"bnb_mode {layout.quantization!r} with {layout.describe()}: bitsandbytes weights are "
                         "estimated under DDP and FSDP2 (accel refuses them with tensor parallelism); leave bnb_mode out "
                         "or use DDP/FSDP2")
    if layout.kind == "tp":
        from accel.estimate.plan import plan_layout

        return [plan.held for plan in plan_layout(build, layout.parallelism, layout.processes, precision, optimizer)]
    if layout.kind == "zero":
        from accel.estimate.zero import zero_bytes

        ranks = zero_bytes(build(), precision, layout.zero_stage or 2, layout.processes, optimizer,
                           offload_optimizer=layout.offload_optimizer, offload_param=layout.offload_param)
        return [replace(rank.device, host=rank.host.total) for rank in ranks]
    shard_size = layout.sizes.get("dp_shard") if layout.kind == "hsdp" else None
    return training_bytes(build(), precision, layout.kind, layout.processes, optimizer, device=device,
                          shard_size=shard_size, quantization=layout.quantization)
