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
* "zero1", "zero2", "zero3": DeepSpeed's ZeRO stages over all processes (communication_zero.py): the
  gradients all-reduced in buckets (1, 2) or reduce-scattered (3), the updated weights all-gathered after
  the step (1, 2) or the parameters as its coordinator fetches them (3), the norm and the overflow flag.
* "tp": tensor parallelism over `tp_size` processes, as the model's tp_plan (or the one given) splits it
  (communication_tp.py): the activations' all-reduces and all-gathers of each micro-batch over the tp
  group; with more processes, FSDP2 as "fsdp" over processes // tp_size of them (dp_shard), of each
  parameter's tp-local part.

"Bytes" are the size of the tensor this rank hands to the collective: the input of an all-reduce or a
broadcast, the output (every rank's part) of an all-gather, the input (every rank's part) of a
reduce-scatter. `CommBytes.ring_bytes` derives what a rank sends with ring algorithms.

Not per step, and reported apart: prepare's broadcast of process 0's parameters and buffers (accel
sends them before wrapping, under every layout but ZeRO's, where DeepSpeed broadcasts the parameters),
DDP's broadcast of its rebuilt bucket order at the second step, ZeRO 3's tracing of its first
micro-batches. Also not counted: accel's object gathers at `Accelerator()` and `prepare` (pickled
layouts), torch's scatter of each split weight at prepare ("tp"), `clip_grad_norm_` (one all-reduce of
the norm under FSDP2), user collectives (`gather`, `reduce`, metrics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

from accel.backends.names import loss_scaled
from accel.estimate.communication_zero import ENGINE_DTYPES, ZeroOptions, _zero_step
from accel.estimate.training import FP8_LEVELS, LAYOUTS, PRECISIONS, _dtype

if TYPE_CHECKING:
    from accel.parallel.tensor_plan import Plan

MIXED = {"fp16": torch.float16, "bf16": torch.bfloat16}  # mixed precision -> FSDP2's param_dtype
REDUCE_DTYPE = torch.float32  # FSDP2's reduce_dtype under mixed precision (accel/fsdp/precision.py)
INDEX_BYTES = 4  # DDP broadcasts its rebuilt bucket order as int32
ALL_LAYOUTS = (*LAYOUTS, "zero1", "zero2", "zero3", "tp")


@dataclass(frozen=True)
class CommBytes:
    """Bytes one rank hands to collectives: per optimizer step by kind, and the one-time broadcasts.

    `all_reduce` includes `scaler_all_reduce`, `norm_all_reduce` and `tp_all_reduce`, `all_gather` includes
    `tp_all_gather`; every rank of a layout hands the same bytes.
    """

    all_reduce: int  # DDP, ZeRO 1-2: the gradients; HSDP: the reduced shards across replicas; plus the parts below
    all_gather: int  # FSDP2, ZeRO: the padded parameters, every rank's part; plus tp_all_gather
    reduce_scatter: int  # FSDP2, ZeRO 3: the padded gradients, every rank's part
    scaler_all_reduce: int  # fp16 under FSDP2, fp16 / bf16 under ZeRO: the found-inf (overflow) flags, shard group
    shard_group: int  # processes an all-gather / reduce-scatter spans (1: nothing sharded)
    replica_group: int  # processes the gradient all-reduce spans (DDP: all; HSDP: processes // shard_size)
    prepare_broadcast: int  # once, at prepare: process 0's parameters and buffers
    bucket_rebuild_broadcast: int  # once, at DDP's second step: its bucket order (int32)
    norm_all_reduce: int = 0  # ZeRO: the gradient norm's all-reduce, over the shard group
    tp_all_reduce: int = 0  # tensor parallelism: the activations' all-reduces, over the tp group
    tp_all_gather: int = 0  # tensor parallelism: the activations' all-gathers (logits), over the tp group
    tp_group: int = 1  # processes the tp collectives span (1: no tensor parallelism)
    trace_all_gather: int = 0  # once, ZeRO 3: what its first micro-batch gathers beyond a steady one (tracing)
    trace_broadcast: int = 0  # once, ZeRO 3: its checks of the traced order across ranks (two first micro-batches)

    @property
    def per_step(self) -> int:
        """The three kinds together, per optimizer step."""
        return self.all_reduce + self.all_gather + self.reduce_scatter

    @property
    def ring_bytes(self) -> float:
        """Bytes this rank sends per step with ring algorithms: an all-gather or reduce-scatter over n
        processes sends (n - 1) / n of its bytes, an all-reduce 2 (n - 1) / n."""
        shards, replicas, tp = self.shard_group, self.replica_group, self.tp_group
        flags = self.scaler_all_reduce + self.norm_all_reduce
        gradients = self.all_reduce - flags - self.tp_all_reduce
        return ((self.all_gather - self.tp_all_gather + self.reduce_scatter + 2 * flags) * (shards - 1) / shards
                + 2 * gradients * (replicas - 1) / replicas
                + (2 * self.tp_all_reduce + self.tp_all_gather) * (tp - 1) / tp)


def _check(precision: str, layout: str, processes: int, shard_size: int | None, accumulation: int,
           tp_size: int) -> int:
    """The shard group's size; ValueError naming an argument this estimate does not cover."""
    for name, value, accepted in (("precision", precision, PRECISIONS), ("layout", layout, ALL_LAYOUTS)):
        if value not in accepted:
            raise ValueError(f"{name}={value!r} is not estimated; accepted: {', '.join(accepted)}")
    if precision in FP8_LEVELS:
        raise ValueError(f"precision={precision!r}: communication under FP8 is not estimated yet")
    if processes < 1 or accumulation < 1:
        raise ValueError(f"processes={processes} and gradient_accumulation_steps={accumulation} must be >= 1")
    if layout.startswith("zero") and precision not in ENGINE_DTYPES:
        raise ValueError(f"precision={precision!r} under layout={layout!r}: DeepSpeed runs no, bf16 or fp16")
    if layout == "tp":
        if tp_size < 2 or processes % tp_size:
            raise ValueError(f"layout='tp' needs tp_size, a divisor of processes={processes} from 2 (got {tp_size}): "
                             "the processes each layer is split over; the rest shard it with FSDP2 (dp_shard)")
        return processes // tp_size
    if layout != "hsdp":
        return processes if layout in ("fsdp", "zero1", "zero2", "zero3") else 1
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
    reshard_after_forward: bool = True, bucket_cap_mb: float = 25.0, zero: ZeroOptions | None = None,
    tp_size: int = 1, batch_size: int | None = None, seq_len: int | None = None, tp_plan: Plan | None = None,
) -> CommBytes:
    """The bytes one rank hands to each collective kind per optimizer step of training `model`.

    An optimizer step is `gradient_accumulation_steps` micro-batches (forward and backward each) under
    `accelerator.accumulate(model)`, then the optimizer's step. Any rank: all hand the same bytes.

    Args:
        model: the model as the script builds it, on the meta device or not (shapes and dtypes are read;
            "tp" and "zero3" run its forward on fake token ids, for its activations and its modules' order,
            and put its parameters back).
        precision: "no", "fp16", "bf16", "bf16-true", "16-true" or "64-true" (FP8 is refused; ZeRO: no, fp16, bf16).
        layout: "ddp", "fsdp" (FSDP2 over all processes), "hsdp" (FSDP2 over `shard_size` processes,
            replicated across the processes // shard_size groups), "zero1", "zero2", "zero3" (DeepSpeed's
            ZeRO stages, communication_zero.py) or "tp" (tensor parallelism over `tp_size` processes, FSDP2
            over processes // tp_size of them when more, communication_tp.py).
        processes: the number of processes.
        shard_size: "hsdp"'s shard group size (ParallelismConfig's dp_shard_size), from 2.
        gradient_accumulation_steps: micro-batches per optimizer step: FSDP2 gathers the parameters in
            every one; the gradients are reduced once, at the micro-batch that syncs (ZeRO 2 and 3: at each).
        sync_each_batch: GradientAccumulationPlugin's option: reduce the gradients at every micro-batch.
        reshard_after_forward: the FSDP plugin's option: False gathers once per micro-batch, not twice.
        bucket_cap_mb: DDP's bucket size, which sets how many buckets its one-time rebuild broadcast names.
        zero: ZeRO 3's zero_optimization settings that change what it gathers (None: DeepSpeed's defaults).
        tp_size: "tp": the processes each planned layer is split over (ParallelismConfig's tp_size).
        batch_size: "tp": sequences in a micro-batch on one rank (the activations tensor parallelism moves);
            "zero3" any (default 1).
        seq_len: "tp": tokens in each sequence; "zero3" any (default 8).
        tp_plan: "tp": the plan (module names to styles, as TorchTensorParallelConfig's); None: the model's own.

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
        >>> zero2 = communication_bytes(model, "bf16", "zero2", processes=8)  # 16-bit gradients, then weights
        >>> zero2.all_reduce == 2 * 4095 * 4097 + 4 + 1, zero2.all_gather == 2 * 4095 * 4097 + 2 * 1
        (True, True)
        >>> with torch.device("meta"):  # 2 x 16 tokens: forward the row-wise output and the logits, backward
        ...     lm = torch.nn.Sequential(torch.nn.Embedding(100, 64), torch.nn.Linear(64, 256),
        ...                              torch.nn.Linear(256, 64), torch.nn.Linear(64, 100))
        >>> plan = {"1": "colwise", "2": "rowwise", "3": "colwise_rep"}  # the column-wise inputs' gradients
        >>> tp = communication_bytes(lm, "no", "tp", 2, tp_size=2, batch_size=2, seq_len=16, tp_plan=plan)
        >>> tp.all_reduce == 3 * 32 * 64 * 4, tp.all_gather == 32 * 100 * 4
        (True, True)
    """
    shards = _check(precision, layout, processes, shard_size, gradient_accumulation_steps, tp_size)
    if processes == 1:
        return CommBytes(0, 0, 0, 0, 1, 1, 0, 0)
    accumulation = gradient_accumulation_steps
    parameters = list(model.parameters())  # tied ones once
    syncs = accumulation if sync_each_batch else 1
    broadcast = sum(t.numel() * t.element_size() for t in [*parameters, *model.buffers()])
    if layout.startswith("zero"):
        if sync_each_batch:
            raise ValueError(f"sync_each_batch=True under layout={layout!r}: DeepSpeed reduces as its stage says")
        step = _zero_step(model, precision, int(layout[-1]), processes, accumulation, zero or ZeroOptions(),
                          (batch_size or 1, seq_len or 8))
        flags = step.norm_all_reduce + step.flag_all_reduce
        return CommBytes(step.gradient_all_reduce + flags, step.all_gather, step.reduce_scatter, step.flag_all_reduce,
                         processes, processes, step.prepare_broadcast, 0, step.norm_all_reduce,
                         trace_all_gather=step.trace_all_gather, trace_broadcast=step.trace_broadcast)
    if layout == "ddp":
        trainable = [p for p in parameters if p.requires_grad]
        gradients = [torch.empty(p.shape, dtype=_dtype(p, precision), device="meta") for p in trainable]
        rebuild = INDEX_BYTES * (len(gradients) + 1 + _buckets(gradients, bucket_cap_mb)) if gradients else 0
        all_reduce = syncs * sum(g.numel() * g.element_size() for g in gradients)
        return CommBytes(all_reduce, 0, 0, 0, 1, processes, broadcast, rebuild)
    tp_reduce = tp_gather = 0
    if layout == "tp":
        if batch_size is None or seq_len is None or batch_size < 1 or seq_len < 1:
            raise ValueError(f"layout='tp' needs batch_size and seq_len from 1 (got {batch_size}, {seq_len}): the "
                             "activations tensor parallelism moves are one micro-batch's")
        from accel.estimate.communication_tp import _local_parameters, _plan_styles, _tensor_parallel_step

        styles = _plan_styles(model, tp_size, tp_plan)
        moved = _tensor_parallel_step(model, styles, precision, batch_size, seq_len, shards > 1)
        tp_reduce, tp_gather = accumulation * moved.all_reduce, accumulation * moved.all_gather
        parameters = _local_parameters(model, styles, tp_size)
    replicas = processes // shards // tp_size
    gather = reduce = scaler = all_reduce = 0
    if shards > 1:
        gather, reduce, scaler, all_reduce = _sharded(parameters, precision, shards, replicas > 1)
        gather *= accumulation * (2 if reshard_after_forward else 1)
        reduce *= syncs
        all_reduce = syncs * all_reduce + scaler
    return CommBytes(all_reduce + tp_reduce, gather + tp_gather, reduce, scaler, shards, replicas, broadcast, 0,
                     tp_all_reduce=tp_reduce, tp_all_gather=tp_gather, tp_group=tp_size)


def _sharded(parameters: list[nn.Parameter], precision: str, shards: int, replicated: bool) -> tuple[int, int, int, int]:
    """FSDP2's bytes for one pass over `parameters`: gathered, reduce-scattered, the scaler's flags, and (HSDP) the
    reduced shard all-reduced across replicas."""
    mixed = MIXED.get(precision)

    def gathered(p: nn.Parameter) -> torch.dtype:
        return mixed if mixed is not None and p.is_floating_point() else _dtype(p, precision)

    trainable = [p for p in parameters if p.requires_grad]
    gather = sum(_padded(p, shards) * gathered(p).itemsize for p in parameters)
    reduce = sum(_padded(p, shards) * (REDUCE_DTYPE if mixed else _dtype(p, precision)).itemsize for p in trainable)
    scaler = 4 * len({_dtype(p, precision) for p in trainable}) if loss_scaled(precision) else 0
    return gather, reduce, scaler, reduce // shards if replicated else 0
