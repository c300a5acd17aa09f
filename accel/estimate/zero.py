"""DeepSpeed ZeRO (stages 1-3, offload) per rank: estimated from shapes (`zero_bytes`), measured on a live engine the
same way (`zero_held_bytes`), equal byte for byte on real runs (tests/estimate/test_zero.py). DeepSpeed 0.19.8's
runtime/zero under its defaults (one param group of the trainable parameters in `model.parameters()` order, gradients
in the model dtype, contiguous_gradients, no stage 1-2 overlap_comm, one micro-batch a step, a torch optimizer). N
processes, rank r, b bytes an element of the model dtype (4 "no"; 2 "bf16"/"fp16", to which all parameters are cast),
held at the optimizer step ("step": after the syncing backward, before the engine steps) or between steps:

* stages 1-2, T trainable elements, F = ceil(T / 2N) * 2N (DeepSpeed aligns to 2N), P = F / N: parameters F*b (the
  flat group, every rank) and frozen ones whole; optimizer P*4 (the fp32 master, a copy under "no" too), the state
  (Adam 2*P*4) and Adam's 4-byte `step` (host); gradients, at "step" only, b times the whole of every parameter
  overlapping [rP, (r+1)P) (a straddling one is held whole by both ranks) plus the zeros padding to P. Stage 1 holds
  what stage 2 does here (it differs during backward). offload_optimizer: master, its fp32 gradient (P*4), state, a
  16-bit copy P*b and a gradient buffer L*b (L: the largest parameter) on the host, L*b more on the device;
* stage 3, P_p = ceil(n_p / N) of each parameter p: parameters sum(P_p)*b, plus P_p*N*b (gathered, padded) for each
  persistent one (in order, n_p <= the param threshold while the sum stays <= the model threshold); gradients
  sum(P_p)*b over the trainable; optimizer fp32 masters and state over those, a `step` a sub-group (host); buffers
  the IPG bucket, reduce_bucket_size*b, all kept between steps. offload_optimizer puts masters, state, gradients and
  their fp32 copy on the host, offload_param the trainable partitions and non-persistent frozen ones.
Not counted: what a step makes and frees (stage 1-2 IPG buckets, a module's gathered parameters, collective buffers,
the fp32 gradient a stage 1-2 step flattens), model buffers, activations, BOOKKEEPING scalars; `zero_held_bytes` puts
any other tensor the ZeRO optimizer holds in `other` (0 when this accounting is complete).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from accel.estimate.measure import storage_bytes
from accel.estimate.training import OPTIMIZERS, STEP_BYTES, RankBytes

PRECISIONS = {"no": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # accel's name -> the engine's model dtype
PHASES = ("step", "after-step")
KINDS = ("parameters", "gradients", "optimizer", "buffers")
BOOKKEEPING = ("_global_grad_norm", "norm_for_param_grads", "inf_or_nan_tracker", "round_robin_bit16_meta")


@dataclass(frozen=True)
class ZeroBytes:
    """One rank's bytes under ZeRO, on its device and on the host (offload, Adam's `step`). RankBytes has no
    place for the host, hence two; `other`: what a measured engine held outside this accounting (0 in estimates)."""

    device: RankBytes
    host: RankBytes
    other: int = 0

    @property
    def total(self) -> int:
        """Device, host and other together."""
        return self.device.total + self.host.total + self.other


class _Bytes(dict[tuple[bool, str], int]):
    """Bytes by (on the host, kind), then a ZeroBytes ("other" has no side)."""

    def add(self, kind: str, size: int, host: bool = False) -> None:
        self[kind != "other" and host, kind] = self.get((kind != "other" and host, kind), 0) + size

    def result(self, rank: int) -> ZeroBytes:
        device, host = (RankBytes(rank, *(self.get((where, kind), 0) for kind in KINDS)) for where in (False, True))
        return ZeroBytes(device, host, self.get((False, "other"), 0))


def zero_bytes(
    model: nn.Module, precision: str, stage: int, processes: int, optimizer: str = "adamw",
    offload_optimizer: bool = False, offload_param: bool = False, reduce_bucket_size: int = 500_000_000,
    param_persistence_threshold: int = 100_000, model_persistence_threshold: int = sys.maxsize,
    sub_group_size: int = 1_000_000_000, phase: str = "step",
) -> list[ZeroBytes]:
    """Each rank's bytes under DeepSpeed ZeRO `stage` for `model` (on the meta device or not: shapes are read).

    Args:
        model: the model as the script builds it (its dtypes are the "no" precision's).
        precision: "no" (fp32), "bf16" or "fp16" (16-bit weights, fp32 masters): what DeepSpeed runs.
        stage: the ZeRO stage: 1, 2 or 3.
        processes: the number of processes ZeRO partitions over.
        optimizer: "adamw", "adam", "sgd" or "sgd-momentum" (a torch optimizer given to prepare).
        offload_optimizer: offload_optimizer_device="cpu": masters, optimizer state, fp32 gradients on the host.
        offload_param: offload_param_device="cpu" (stage 3): the parameters' partitions on the host.
        reduce_bucket_size: zero_optimization.reduce_bucket_size, elements (stage 3 keeps this bucket).
        param_persistence_threshold: stage3_param_persistence_threshold: parameters this small stay gathered.
        model_persistence_threshold: stage3_model_persistence_threshold: the most elements kept gathered.
        sub_group_size: zero_optimization.sub_group_size, elements (stage 3's optimizer sub-groups).
        phase: "step" (at the optimizer step, gradients held) or "after-step" (between steps).

    Returns:
        One ZeroBytes (device and host RankBytes) per rank, in rank order.

    Example:
        >>> with torch.device("meta"):
        ...     model = torch.nn.Linear(4096, 4096)
        >>> rank = zero_bytes(model, "bf16", stage=3, processes=8, reduce_bucket_size=4096 * 4096)[0]
        >>> rank.device.gradients, rank.device.optimizer  # 2 and 12 bytes x 4096 x 4097 / 8 (+ the bias gathered)
        (4195328, 25171968)
    """
    if precision not in PRECISIONS:
        from accel.backends.deepspeed import REFUSED  # accel's own refusals under DeepSpeed

        why = REFUSED.get("fp8" if precision.startswith("fp8") else precision, "not one of accel's precisions")
        raise ValueError(f"precision={precision!r} is not one accel runs under DeepSpeed ({why}); accepted: no, bf16, "
                         "fp16")
    for name, value, accepted in (("stage", stage, (1, 2, 3)), ("optimizer", optimizer, tuple(OPTIMIZERS)),
                                  ("phase", phase, PHASES)):
        if value not in accepted:
            raise ValueError(f"{name}={value!r} is not estimated; accepted: {', '.join(map(str, accepted))}")
    if processes < 1 or offload_param and stage != 3:
        raise ValueError(f"processes={processes} must be at least 1" if processes < 1 else
                         f"offload_param=True with stage={stage}: only ZeRO 3 partitions (and offloads) parameters")
    target = PRECISIONS[precision]
    sizes = [(p.numel(), (target if target and p.is_floating_point() else p.dtype).itemsize, p.requires_grad)
             for p in model.parameters()]
    trainable = [n for n, _, grad in sizes if grad and n]
    if not trainable:
        raise ValueError("the model has no trainable parameters: ZeRO's optimizer needs some")
    b = next(size for n, size, grad in sizes if grad and n)
    states, step = OPTIMIZERS[optimizer], STEP_BYTES if optimizer.startswith("adam") else 0
    ranks = []
    for rank in range(processes):
        held = _Bytes()
        if stage < 3:
            _stage_1_2(held, trainable, b, processes, rank, states, step, offload_optimizer, phase)
            held.add("parameters", sum(n * size for n, size, grad in sizes if not grad))
        else:
            _stage_3(held, sizes, b, processes, states, step, offload_optimizer, offload_param, reduce_bucket_size,
                     (param_persistence_threshold, model_persistence_threshold), sub_group_size)
        ranks.append(held.result(rank))
    return ranks


def _stage_1_2(held: _Bytes, trainable: list[int], b: int, n: int, rank: int, states: int, step: int,
               offload: bool, phase: str) -> None:
    """The flat group on every rank, the rank's fp32 partition and state and, at the step, its gradients."""
    total = sum(trainable)
    part = math.ceil(total / (2 * n)) * 2
    start, overlapping, offset = rank * part, 0, 0
    for size in trainable:  # get_partition_info: parameters starting in the partition, or straddling its start
        overlapping += size if start <= offset < start + part or offset < start < offset + size else 0
        offset += size
    held.add("parameters", part * n * b)
    held.add("optimizer", part * 4 * (1 + states), host=offload)
    held.add("optimizer", step, host=True)
    if offload:
        held.add("gradients", part * 4, host=True)
        held.add("buffers", part * b + max(trainable) * b, host=True)
        held.add("buffers", max(trainable) * b)
    elif phase == "step":
        held.add("gradients", (overlapping + part - max(0, min(part, total - start))) * b)


def _stage_3(held: _Bytes, sizes: list[tuple[int, int, bool]], b: int, n: int, states: int, step: int,
             offload_optimizer: bool, offload_param: bool, bucket: int, persistence: tuple[int, int],
             sub_group_size: int) -> None:
    """Each parameter's partition, the persistent ones gathered, the fp32 sub-groups, the gradients, the bucket."""
    partitions, kept = [], 0
    for numel, size, trainable in sizes:
        part = math.ceil(numel / n)
        persistent = numel <= persistence[0] and kept + numel <= persistence[1]  # mark_persistent_parameters
        kept += numel if persistent else 0
        held.add("parameters", part * n * size if persistent else 0)
        held.add("parameters", part * size, host=offload_param and (trainable or not persistent))
        partitions += [part] if trainable else []
    flat = sum(partitions)
    sub_groups, filled = int(sub_group_size >= flat), 0
    for index, part in enumerate([] if sub_groups else partitions):  # _create_fp16_sub_groups
        filled += part
        if filled >= sub_group_size or index == len(partitions) - 1:
            sub_groups, filled = sub_groups + 1, 0
    held.add("gradients", flat * b, host=offload_optimizer)
    held.add("gradients", flat * 4 if offload_optimizer else 0, host=True)
    held.add("optimizer", flat * 4 * (1 + states), host=offload_optimizer)
    held.add("optimizer", step * sub_groups, host=True)
    held.add("buffers", bucket * b)


_ROLES = {name: kind for kind, names in (  # the ZeRO optimizer's attributes -> what they hold
    ("parameters", "bit16_groups_flat lp_param_buffer param_groups_fp16_flat_cpu_memory fp16_partitioned_groups_flat "
                   "fp16_partitioned_groups bit16_groups fp16_groups persistent_parameters"),
    ("gradients", "grad_partitions_flat_buffer grads_in_partition averaged_gradients all_grad_tensors "
                  "accumulated_grads_in_cpu"),
    ("optimizer", "single_partition_of_fp32_groups fp32_partitioned_groups_flat"),
    ("buffers", "ipg_buckets temp_grad_buffer_for_gpu_offload temp_grad_buffer_for_cpu_offload "
                "param_buffer_of_bit16_for_cpu_offload_groups")) for name in names.split()}
_HOST_BUFFERS = ("temp_grad_buffer_for_cpu_offload", "param_buffer_of_bit16_for_cpu_offload_groups")
_OFFLOADED_PARAMETERS = ("param_groups_fp16_flat_cpu_memory", "fp16_partitioned_groups_flat", "fp16_partitioned_groups")


def _tensors(value: Any, skipped: set[int], depth: int = 0) -> Iterable[torch.Tensor]:
    """The tensors in `value`'s containers and DeepSpeed objects, not under `skipped` ids (the ZeRO optimizer)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple, set, dict)) and id(value) not in skipped:
        skipped.add(id(value))
        for item in [*value.keys(), *value.values()] if isinstance(value, dict) else value:
            yield from _tensors(item, skipped, depth)
    elif depth < 3 and id(value) not in skipped and not isinstance(value, (nn.Module, torch.optim.Optimizer)) and \
            type(value).__module__.startswith("deepspeed") and hasattr(value, "__dict__"):
        skipped.add(id(value))
        yield from _tensors(list(vars(value).values()), skipped, depth + 1)


def zero_held_bytes(engine_or_model: Any, optimizer: Any = None) -> ZeroBytes:
    """What a live DeepSpeed ZeRO engine holds on this rank, counted as `zero_bytes` estimates it: each storage once,
    under the first of the module's parameters (their `ds_tensor`) and gradients, the inner optimizer's masters and
    state, the ZeRO optimizer's attributes by role; host or device by the tensor's device (on the CPU, by offload).

    Args:
        engine_or_model: the prepared model (DeepSpeed's engine).
        optimizer: the prepared optimizer, or DeepSpeed's ZeRO optimizer (None: the engine's).

    Example:
        >>> model, optimizer = accelerator.prepare(model, optimizer)  # doctest: +SKIP
        >>> zero_held_bytes(model, optimizer).device.gradients  # doctest: +SKIP
    """
    zero = engine_or_model.optimizer if optimizer is None else optimizer
    while not {"bit16_groups", "fp16_groups"} & set(getattr(zero, "__dict__", {})):  # its own: wrappers forward
        if not hasattr(zero, "optimizer"):
            raise ValueError(f"{type(zero).__name__} is not a DeepSpeed ZeRO optimizer, nor wraps one")
        zero = zero.optimizer
    on_cpu = getattr(engine_or_model, "device", torch.device("cpu")).type == "cpu"
    offload_optimizer = bool(getattr(zero, "cpu_offload", False) or getattr(zero, "offload_optimizer", False))
    offload_param = bool(getattr(zero, "offload_param", False))
    held, seen = _Bytes(), set[tuple[str, int]]()

    def count(kind: str, tensors: Iterable[Any], host: bool = False) -> None:
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                held.add(kind, storage_bytes([tensor], seen), host if on_cpu else tensor.device.type == "cpu")

    for p in getattr(engine_or_model, "module", engine_or_model).parameters():
        count("parameters", [p])
        host = offload_param and (p.requires_grad or not getattr(p, "ds_persist", True))
        count("parameters", [getattr(p, "ds_tensor", None)], host)
        count("gradients", [p.grad, getattr(p, "grad_accum", None)])
    masters = [p for group in zero.optimizer.param_groups for p in group["params"]] + list(zero.optimizer.state)
    count("optimizer", masters, offload_optimizer)
    count("gradients", [p.grad for p in masters], offload_optimizer)
    for value in (value for state in zero.optimizer.state.values() for value in state.values()):
        count("optimizer", [value], offload_optimizer or isinstance(value, torch.Tensor) and value.dim() == 0)
    for name, kind in _ROLES.items():
        host = {"gradients": offload_optimizer, "optimizer": offload_optimizer, "buffers": name in _HOST_BUFFERS,
                "parameters": offload_param and name in _OFFLOADED_PARAMETERS}[kind]
        count(kind, _tensors(getattr(zero, name, None), {id(zero)}), host)
    others = [value for name, value in vars(zero).items() if name not in _ROLES and name not in BOOKKEEPING]
    count("other", _tensors(others, {id(zero)}))
    return held.result(torch.distributed.get_rank() if torch.distributed.is_initialized() else 0)
