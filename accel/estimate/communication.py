"""Communication per rank and per optimizer step, before the job: the bytes each collective kind moves.

Computed from the parameters' shapes alone (a model on the meta device), by the rules accel's layouts
follow (checked against a process group that counts every collective of real runs, in tests/estimate/):

* "ddp": DistributedDataParallel all-reduces every trainable parameter's gradient once per optimizer
  step (in its buckets, in the gradient's dtype: float32 under fp16/bf16, whose trainable weights accel
  keeps as float32 masters); accel's `accumulate` skips the all-reduce on the micro-batches that do not
  sync (`no_sync`). Frozen parameters are not in the buckets.
* "fsdp" (FSDP2 over all N processes) and "hsdp" (FSDP2 over `shard_size` processes, replicated across
  the groups of them): each parameter is sharded on dim 0 in chunks of ceil(rows / N) and all-gathered
  padded to N chunks, frozen ones too, in the MixedPrecisionPolicy's param_dtype (bfloat16 / float16
  under bf16 / fp16, else the parameter's own); accel passes `reshard_after_forward` (True by default)
  to every unit, the root too, so each micro-batch gathers in forward and again in backward (False:
  forward only). The trainable gradients are reduce-scattered, padded the same way, in the policy's
  reduce_dtype (float32 under fp16 / bf16, else the gradient's); under "hsdp" the reduced shard is then
  all-reduced across the replicas. fp16's loss scaler all-reduces its found-inf flag (one float32 per
  gradient dtype) over the shard group at each step.

"Bytes" are the size of the tensor this rank hands to the collective: the input of an all-reduce or a
broadcast, the output (every rank's part) of an all-gather, the input (every rank's part) of a
reduce-scatter. `CommBytes.ring_bytes` derives what a rank sends with ring algorithms.

Not per step, and reported apart: prepare's broadcast of process 0's parameters and buffers (accel
sends them before wrapping, under every layout), and DDP's broadcast of its rebuilt bucket order at the
second step. Also not counted: accel's object gathers at `Accelerator()` and `prepare` (pickled layouts),
`clip_grad_norm_` (one all-reduce of the norm under FSDP2), user collectives (`gather`, `reduce`, metrics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from accel.estimate.training import FP8_LEVELS, LAYOUTS, PRECISIONS, _dtype

MIXED = {"fp16": torch.float16, "bf16": torch.bfloat16}  # mixed precision -> FSDP2's param_dtype
REDUCE_DTYPE = torch.float32  # FSDP2's reduce_dtype under mixed precision (accel/fsdp/precision.py)
INDEX_BYTES = 4  # DDP broadcasts its rebuilt bucket order as int32


@dataclass(frozen=True)
class CommBytes:
    """Bytes one rank hands to collectives: per optimizer step by kind, and the one-time broadcasts.

    `all_reduce` includes `scaler_all_reduce`; every rank of a layout hands the same bytes.
    """

    all_reduce: int  # DDP: the gradients; HSDP: the reduced shards across replicas; plus scaler_all_reduce
    all_gather: int  # FSDP2: the padded parameters, every rank's part
    reduce_scatter: int  # FSDP2: the padded gradients, every rank's part
    scaler_all_reduce: int  # fp16 under FSDP2: the loss scaler's found-inf flags, over the shard group
    shard_group: int  # processes an all-gather / reduce-scatter spans (1: nothing sharded)
    replica_group: int  # processes the gradient all-reduce spans (DDP: all; HSDP: processes // shard_size)
    prepare_broadcast: int  # once, at prepare: process 0's parameters and buffers
    bucket_rebuild_broadcast: int  # once, at DDP's second step: its bucket order (int32)

    @property
    def per_step(self) -> int:
        """The three kinds together, per optimizer step."""
        return self.all_reduce + self.all_gather + self.reduce_scatter

    @property
    def ring_bytes(self) -> float:
        """Bytes this rank sends per step with ring algorithms: an all-gather or reduce-scatter over n
        processes sends (n - 1) / n of its bytes, an all-reduce 2 (n - 1) / n."""
        shards, replicas = self.shard_group, self.replica_group
        gradients = self.all_reduce - self.scaler_all_reduce
        return ((self.all_gather + self.reduce_scatter + 2 * self.scaler_all_reduce) * (shards - 1) / shards
                + 2 * gradients * (replicas - 1) / replicas)


def _check(precision: str, layout: str, processes: int, shard_size: int | None, accumulation: int) -> int:
    """The shard group's size; ValueError naming an argument this estimate does not cover."""
    for name, value, accepted in (("precision", precision, PRECISIONS), ("layout", layout, LAYOUTS)):
        if value not in accepted:
            raise ValueError(f"{name}={value!r} is not estimated; accepted: {', '.join(accepted)}")
    if precision in FP8_LEVELS:
        raise ValueError(f"precision={precision!r}: communication under FP8 is not estimated yet")
    if processes < 1 or accumulation < 1:
        raise ValueError(f"processes={processes} and gradient_accumulation_steps={accumulation} must be >= 1")
    if layout != "hsdp":
        return processes if layout == "fsdp" else 1
    if shard_size is None or shard_size < 2 or processes % shard_size:
        raise ValueError(f"layout='hsdp' needs shard_size, a divisor of processes={processes} from 2 (got "
                         f"{shard_size}): the processes each group shards over (ParallelismConfig's dp_shard_size)")
    return shard_size


def _padded(parameter: nn.Parameter, shards: int) -> int:
    """Elements of `parameter` as FSDP2 pads it: dim 0 rounded up to a multiple of `shards`."""
    rows = parameter.shape[0] if parameter.dim() else 1
    return math.ceil(rows / shards) * shards * (parameter.numel() // max(rows, 1))


def _buckets(gradients: list[torch.Tensor], bucket_cap_mb: float) -> int:
    """How many buckets DDP rebuilds for `gradients` (meta tensors), ready in reverse order."""
    caps = [dist._DEFAULT_FIRST_BUCKET_BYTES, int(bucket_cap_mb * 1024 * 1024)]
    assignment, _ = dist._compute_bucket_assignment_by_size(gradients[::-1], caps, [False] * len(gradients))
    return len(assignment)


def communication_bytes(
    model: nn.Module, precision: str = "no", layout: str = "ddp", processes: int = 1,
    shard_size: int | None = None, *, gradient_accumulation_steps: int = 1, sync_each_batch: bool = False,
    reshard_after_forward: bool = True, bucket_cap_mb: float = 25.0,
) -> CommBytes:
    """The bytes one rank hands to each collective kind per optimizer step of training `model`.

    An optimizer step is `gradient_accumulation_steps` micro-batches (forward and backward each) under
    `accelerator.accumulate(model)`, then the optimizer's step. Any rank: all hand the same bytes.

    Args:
        model: the model as the script builds it, on the meta device or not (only shapes and dtypes are read).
        precision: "no", "fp16", "bf16", "bf16-true", "16-true" or "64-true" (FP8 is refused).
        layout: "ddp", "fsdp" (FSDP2 over all processes) or "hsdp" (FSDP2 over `shard_size` processes,
            replicated across the processes // shard_size groups).
        processes: the number of processes.
        shard_size: "hsdp"'s shard group size (ParallelismConfig's dp_shard_size), from 2.
        gradient_accumulation_steps: micro-batches per optimizer step: FSDP2 gathers the parameters in
            every one; the gradients are reduced once, at the micro-batch that syncs.
        sync_each_batch: GradientAccumulationPlugin's option: reduce the gradients at every micro-batch.
        reshard_after_forward: the FSDP plugin's option: False gathers once per micro-batch, not twice.
        bucket_cap_mb: DDP's bucket size, which sets how many buckets its one-time rebuild broadcast names.

    Returns:
        A CommBytes: per-step bytes by kind, the groups they span, and the one-time broadcasts.

    Example:
        >>> with torch.device("meta"):
        ...     model = torch.nn.Linear(4096, 4095)  # 4095 rows: padded to 4096 on 8 shards
        >>> step = communication_bytes(model, "bf16", "fsdp", processes=8)
        >>> step.all_gather == 2 * 2 * 4096 * 4097, step.reduce_scatter == 4 * 4096 * 4097
        (True, True)
        >>> communication_bytes(model, "bf16", "ddp", processes=8).all_reduce == 4 * 4095 * 4097
        True
    """
    shards = _check(precision, layout, processes, shard_size, gradient_accumulation_steps)
    if processes == 1:
        return CommBytes(0, 0, 0, 0, 1, 1, 0, 0)
    parameters = list(model.parameters())  # tied ones once
    trainable = [p for p in parameters if p.requires_grad]
    syncs = gradient_accumulation_steps if sync_each_batch else 1
    broadcast = sum(t.numel() * t.element_size() for t in [*parameters, *model.buffers()])
    if layout == "ddp":
        gradients = [torch.empty(p.shape, dtype=_dtype(p, precision), device="meta") for p in trainable]
        rebuild = INDEX_BYTES * (len(gradients) + 1 + _buckets(gradients, bucket_cap_mb)) if gradients else 0
        all_reduce = syncs * sum(g.numel() * g.element_size() for g in gradients)
        return CommBytes(all_reduce, 0, 0, 0, 1, processes, broadcast, rebuild)
    mixed = MIXED.get(precision)

    def gathered(p: nn.Parameter) -> torch.dtype:
        return mixed if mixed is not None and p.is_floating_point() else _dtype(p, precision)

    gather = sum(_padded(p, shards) * gathered(p).itemsize for p in parameters)
    reduce = sum(_padded(p, shards) * (REDUCE_DTYPE if mixed else _dtype(p, precision)).itemsize for p in trainable)
    replicas = processes // shards
    scaler = 4 * len({_dtype(p, precision) for p in trainable}) if precision == "fp16" else 0
    all_reduce = (syncs * reduce // shards if replicas > 1 else 0) + scaler
    passes = 2 if reshard_after_forward else 1
    return CommBytes(all_reduce, gradient_accumulation_steps * passes * gather, syncs * reduce, scaler,
                     shards, replicas, broadcast, 0)
