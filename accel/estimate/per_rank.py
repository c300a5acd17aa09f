"""Each rank's bytes for a layout: the one entry point over the rules of each layout.

DDP, FSDP2 and HSDP follow training.py's formulas (every rank computed); DeepSpeed ZeRO follows zero.py's
(at the optimizer step, the gradients held; what offload keeps on the host in `RankBytes.host`);
a layout with tensor parallelism is planned with torch's and accel's real sharding code on the fake
process group (plan.py), for its first and last rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from torch import nn

from accel.estimate.layout import Layout
from accel.estimate.training import FP8_LEVELS, RankBytes, training_bytes

if TYPE_CHECKING:
    from accel.estimate.communication import CommBytes


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

        model = build()
        ranks = zero_bytes(model, precision, layout.zero_stage or 2, layout.processes, optimizer,
                           offload_optimizer=layout.offload_optimizer, offload_param=layout.offload_param,
                           **zero_sizes(model, layout.zero_options))
        return [replace(rank.device, host=rank.host.total) for rank in ranks]
    shard_size = layout.sizes.get("dp_shard") if layout.kind == "hsdp" else None
    return training_bytes(build(), precision, layout.kind, layout.processes, optimizer, device=device,
                          shard_size=shard_size, quantization=layout.quantization)



def estimate_communication(
    build: Callable[[], nn.Module], layout: Layout, precision: str, batch_size: int | None = None,
    seq_len: int | None = None, device: str = "cuda",
) -> CommBytes | None:
    """What each rank of `layout` hands to collectives per optimizer step (communication.py), or None where it
    is not estimated: one process, FP8, bitsandbytes, tensor parallelism without a micro-batch (it moves
    activations, so it needs `batch_size` and `seq_len`).

    Args:
        build: makes the model on the meta device.
        layout: the processes and how they hold the model.
        precision: training.py's precision name.
        batch_size: sequences per micro-batch on one rank (tensor parallelism).
        seq_len: tokens per sequence (tensor parallelism).
        device: "cuda" or "cpu": accel gathers ZeRO 3's parameters one at a time on the CPU.

    Example:
        >>> from accel.estimate.models import build_on_meta
        >>> sent = estimate_communication(lambda: build_on_meta("gpt"), Layout(4, "fsdp", {"dp_shard": 4}), "bf16")
        >>> sent.all_gather == sent.reduce_scatter  # two bf16 gathers weigh one float32 reduce-scatter
        True
    """
    from accel.estimate.communication import communication_bytes
    from accel.estimate.communication_zero import ZeroOptions

    if layout.processes == 1 or precision in FP8_LEVELS or layout.quantization or (
            layout.kind == "tp" and (batch_size is None or seq_len is None)):
        return None
    model = build()
    options: dict[str, Any] = {}
    kind = f"zero{layout.zero_stage}" if layout.kind == "zero" else layout.kind
    if layout.kind == "zero":
        sizes = zero_sizes(model, layout.zero_options)
        sizes.pop("reduce_bucket_size", None)  # what a rank holds, not what it sends
        options["zero"] = ZeroOptions(**sizes, allgather_sequential=device == "cpu")  # accel's setting on the CPU
    if layout.kind == "tp":
        options.update(tp_size=layout.sizes["tp"], batch_size=batch_size, seq_len=seq_len)
    shard_size = layout.sizes.get("dp_shard") if layout.kind == "hsdp" else None
    return communication_bytes(model, precision, kind, layout.processes, shard_size, **options)

_ZERO_ARGUMENTS = {"reduce_bucket_size": "reduce_bucket_size", "sub_group_size": "sub_group_size",
                   "stage3_param_persistence_threshold": "param_persistence_threshold",
                   "stage3_model_persistence_threshold": "model_persistence_threshold"}
_FROM_HIDDEN = {"reduce_bucket_size": lambda h: h * h, "stage3_param_persistence_threshold": lambda h: 10 * h}
"""Accelerate's (and accel's, accel/deepspeed/config.py) fill of "auto" from model.config.hidden_size."""


def zero_sizes(model: nn.Module, options: dict[str, int | str]) -> dict[str, Any]:
    """zero_bytes' size arguments from a DeepSpeed config's zero_optimization values, "auto" filled as at prepare."""
    sizes: dict[str, Any] = {}
    for key, value in options.items():
        if value == "auto":
            hidden = getattr(getattr(model, "config", None), "hidden_size", None)
            if key not in _FROM_HIDDEN:
                continue  # DeepSpeed's default stands
            if hidden is None:
                raise ValueError(f"the DeepSpeed config has \"auto\" at zero_optimization.{key}, filled from "
                                 "model.config.hidden_size, which this model lacks: give an integer there")
            value = _FROM_HIDDEN[key](int(hidden))
        sizes[_ZERO_ARGUMENTS[key]] = int(value)
    return sizes
