"""DeepSpeed ZeRO's communication per rank and optimizer step: `communication_bytes(layout="zero1|zero2|zero3")`.

DeepSpeed 0.19.8 under the config accel gives it (zero.py's conventions; DeepSpeed's defaults: reduce_scatter and
contiguous_gradients on, multi-rank bucket all-reduce, stage 1-2 overlap_comm off). N processes, T trainable
elements, b bytes an element of the engine's dtype (4 "no"; 2 "bf16"/"fp16", to which it casts every parameter),
which is also its communication dtype; G micro-batches a step. Bucket sizes change how many calls, not the bytes.

* stages 1-2: the trainable gradients are all-reduced in their buckets, T*b (multi-rank buckets all-reduce each
  bucket's slices: every element once, no padding): stage 1 once, at the step's last micro-batch; stage 2 at every
  micro-batch (its hooks reduce as gradients come), G*T*b. At the step: the gradient norm, one float32 all-reduce
  (4 bytes); under fp16 and bf16 (check_grad_overflow) the overflow flag, a uint8 (1); after the optimizer the
  updated flat group all-gathered, F*b with F = ceil(T / 2N) * 2N (aligned to 2N, as zero.py holds it);
* stage 3: a parameter of n elements is all-gathered padded to ceil(n / N) * N, in b. The persistent ones (zero.py's
  rule) are released at the step and gathered again after it, once a step; the others (frozen too) as DeepSpeed's
  parameter coordinator fetches them in each micro-batch. From the second micro-batch of the run on, its trace of
  the modules is complete and it keeps a parameter gathered while the parameter's next use is within
  stage3_max_reuse_distance elements, or was already reached by its prefetching (stage3_prefetch_bucket_size ahead;
  one parameter at a time under stage3_allgather_sequential, which accel sets on the CPU): a model whose uses fit
  those windows gathers each once a micro-batch, a larger one some again in backward. `_gathers` replays the
  coordinator over the modules' order, read from a forward on fake tensors (backward: its mirror). The trainable
  gradients are reduce-scattered at every micro-batch, padded alike: G * sum(ceil(n / N) * N) * b. At the step:
  the norm, one float64 all-reduce (8 bytes: CPU's norm dtype) per optimizer sub-group; under fp16 the flag (1).

Once, counted apart: stage 3's first micro-batch, while the coordinator records the trace, gathers each module's
parameters at each use and releases them, persistent ones too (`trace_all_gather`: what it gathers beyond a steady
micro-batch, and the persistent ones again in the second when no step came between), and its first two
check the traced order across ranks (int64 broadcasts: `trace_broadcast`); at prepare, deepspeed.initialize
broadcasts the parameters in b (stages 1-2: once; stage 3: twice, and it all-gathers the trainable ones once,
not counted). Not estimated: offload, checkpointing, user collectives.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from accel.backends.deepspeed import overflow_flag_all_reduced

ENGINE_DTYPES = {"no": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # accel's precision -> DeepSpeed's dtype
NORM_BYTES = {1: 4, 2: 4, 3: 8}  # the gradient norm's all-reduce: float32 in stages 1-2, float64 (CPU) in stage 3
FLAG_BYTES = 1  # the overflow flag, uint8
INT_BYTES = 8  # the trace checks' lists are int64


@dataclass(frozen=True)
class ZeroOptions:
    """The zero_optimization settings that change what ZeRO 3 gathers, at DeepSpeed's defaults."""

    param_persistence_threshold: int = 100_000  # stage3_param_persistence_threshold
    model_persistence_threshold: int = sys.maxsize  # stage3_model_persistence_threshold
    max_reuse_distance: int = 1_000_000_000  # stage3_max_reuse_distance
    prefetch_bucket_size: int = 50_000_000  # stage3_prefetch_bucket_size
    max_live_parameters: int = 1_000_000_000  # stage3_max_live_parameters
    sub_group_size: int = 1_000_000_000  # sub_group_size
    allgather_sequential: bool = False  # stage3_allgather_sequential (accel sets it on the CPU): prefetch one at a time


@dataclass(frozen=True)
class ZeroStep:
    """Bytes one rank hands to each collective kind in one optimizer step of ZeRO, and ZeRO 3's one-time trace."""

    gradient_all_reduce: int
    norm_all_reduce: int
    flag_all_reduce: int
    all_gather: int
    reduce_scatter: int
    trace_all_gather: int = 0  # once: what the first micro-batch gathers beyond a steady one
    trace_broadcast: int = 0  # once: the trace's checks across ranks (int64 lists, first two micro-batches)
    prepare_broadcast: int = 0  # once, at deepspeed.initialize: the parameters from process 0


def _zero_step(model: nn.Module, precision: str, stage: int, processes: int, accumulation: int, options: ZeroOptions,
               tokens: tuple[int, int] = (1, 8)) -> ZeroStep:
    """The bytes of each kind for one optimizer step of `accumulation` micro-batches (see the module's docstring);
    `tokens`: the batch size and sequence length of the fake forward that orders stage 3's modules (any: the order
    does not depend on them)."""
    target = ENGINE_DTYPES[precision]
    parameters = list(model.parameters())
    size = {id(p): (target if target and p.is_floating_point() else p.dtype).itemsize for p in parameters}
    trainable = [p for p in parameters if p.requires_grad]
    b = size[id(trainable[0])] if trainable else 4
    flag = FLAG_BYTES if overflow_flag_all_reduced(precision, stage) else 0
    broadcast = (2 if stage == 3 else 1) * sum(p.numel() * size[id(p)] for p in parameters)
    if stage < 3:
        total = sum(p.numel() for p in trainable)
        flat = math.ceil(total / (2 * processes)) * 2 * processes
        syncs = accumulation if stage == 2 else 1
        return ZeroStep(syncs * total * b, NORM_BYTES[stage], flag, flat * b, 0, prepare_broadcast=broadcast)
    padded = {id(p): math.ceil(p.numel() / processes) * processes * size[id(p)] for p in parameters}
    persistent, kept = set(), 0
    for p in parameters:  # mark_persistent_parameters, in named_parameters order
        if p.numel() + kept <= options.model_persistence_threshold and p.numel() <= options.param_persistence_threshold:
            persistent.add(id(p))
            kept += p.numel()
    events = _module_events(model, tokens)
    steady = sum(count * padded[key] for key, count in _gathers(events, model, persistent, options).items())
    fetches = [keys for fetch, keys in events if fetch]
    recording = sum(padded[key] for keys in fetches for key in keys)  # the first micro-batch: every use gathers all
    checks = 4 * INT_BYTES + INT_BYTES * (len(fetches) + 2 * sum(len(keys) for keys in fetches))
    norms = NORM_BYTES[3] * _sub_groups([math.ceil(p.numel() / processes) for p in trainable], options)
    scatter = accumulation * sum(padded[id(p)] for p in trainable)
    kept_bytes = sum(padded[key] for key in persistent)
    # the recording micro-batch releases the persistent ones too: the next gathers them again unless a step came first
    again = kept_bytes if accumulation > 1 else 0
    return ZeroStep(0, norms, flag, accumulation * steady + kept_bytes, scatter, recording - steady + again, checks,
                    broadcast)


def _sub_groups(partitions: list[int], options: ZeroOptions) -> int:
    """How many optimizer sub-groups stage 3 makes of the trainable partitions (_create_fp16_sub_groups)."""
    if options.sub_group_size >= sum(partitions):
        return 1
    groups, filled = 0, 0
    for index, part in enumerate(partitions):
        filled += part
        if filled >= options.sub_group_size or index == len(partitions) - 1:
            groups, filled = groups + 1, 0
    return groups


def _needs_grad(value: Any) -> bool:
    """Whether a tensor in `value` (nested in tuples, lists, dicts) requires grad: DeepSpeed hooks those."""
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (tuple, list)) and any(_needs_grad(item) for item in value)


def _module_events(model: nn.Module, tokens: tuple[int, int]) -> list[tuple[bool, tuple[int, ...]]]:
    """One micro-batch as ZeRO 3's coordinator sees it: (fetch, else release; the module's own parameters by id), a
    forward on fake tensors giving the forward's order, its mirror the backward's (a module is fetched there when its
    output needs a gradient, released when its input does)."""
    from accel.estimate.communication_tp import _fake_forward

    forward: list[tuple[bool, nn.Module, bool]] = []
    _fake_forward(model, "no", *tokens, None,
                  lambda module, args: forward.append((False, module, _needs_grad(args))),
                  lambda module, args, output: forward.append((True, module, _needs_grad(output))))
    events = [(not done, module) for done, module, _ in forward]
    events += [(done, module) for done, module, grad in reversed(forward) if grad]
    order = {id(p): index for index, p in enumerate(model.parameters())}  # DeepSpeed's ds_id order
    return [(fetch, tuple(sorted({id(p) for p in module.parameters(recurse=False)}, key=order.__getitem__)))
            for fetch, module in events]


def _gathers(events: list[tuple[bool, tuple[int, ...]]], model: nn.Module, persistent: set[int],
             options: ZeroOptions) -> dict[int, int]:
    """How many times each parameter (by id) is all-gathered in a micro-batch once the coordinator's trace is
    complete: its fetches, prefetches and releases (partitioned_param_coordinator.py) replayed over `events`."""
    numel = {id(p): p.numel() for p in model.parameters()}
    fetches = [keys for fetch, keys in events if fetch]
    queue = deque((key, step) for step, keys in enumerate(fetches) for key in keys)
    latest: dict[int, int] = defaultdict(lambda: -10**10)  # the last step each parameter was fetched or prefetched for
    available, counts, live, step = set(persistent), dict.fromkeys(numel, 0), 0, 0
    prefetch = 1 if options.allgather_sequential else options.prefetch_bucket_size

    def gather(keys: set[int]) -> int:
        fresh = {key for key in keys if key not in available}
        available.update(fresh)
        for key in fresh:
            counts[key] += 1
        return sum(numel[key] for key in fresh)

    for fetch, keys in events:
        if not fetch:  # release, unless used again within max_reuse_distance elements or prefetched for later
            released, traversed = {key for key in keys if key not in persistent and latest[key] <= step}, 0
            for later in fetches[step:]:
                if traversed >= options.max_reuse_distance:
                    break
                released -= set(later)
                traversed += sum(numel[key] for key in later)
            live -= sum(numel[key] for key in released & available)
            available -= released
            continue
        live += gather(set(keys))
        wanted, popped = {key for key in keys if latest[key] < step}, set[int]()
        while queue and len(popped) < len(wanted):  # the current module's entries leave the queue
            key, used = queue.popleft()
            latest[key] = used
            popped.add(key)
        budget, chosen, prefetching = min(options.max_live_parameters - live, prefetch), set[int](), 0
        while prefetch > 0 and queue and prefetching < budget:
            key, used = queue.popleft()
            latest[key] = max(latest[key], used)
            if key not in available and key not in chosen:
                chosen.add(key)
                prefetching += numel[key]
        live += gather(chosen)
        step += 1
    return counts
