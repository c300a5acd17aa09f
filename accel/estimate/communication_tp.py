"""Tensor parallelism's communication per rank and micro-batch: `communication_bytes(layout="tp")`.

torch's DTensor styles, as accel applies a plan (accel/parallel/tensor_plan.py: the model's own tp_plan, or the
one given), move activations over the tp group; each planned layer's input and output are read from one forward
of the whole model on fake tensors (shapes and dtypes, no memory: under bf16 / fp16 autocast makes the linear
layers' outputs 16-bit, an embedding's or a norm's follow their float32 weights; under FSDP2, and under the -true
precisions, the weights themselves are 16-bit), for a micro-batch of batch_size x seq_len tokens:

* ColwiseParallel (colwise): its replicated input's gradient comes back partial from each rank's columns and is
  all-reduced in backward (the input's size and dtype); with Replicate output (colwise_rep, colwise_gather_output,
  an lm_head) its output is all-gathered in forward (the output's size and dtype); a column-wise embedding's
  output likewise, its integer input has no gradient;
* RowwiseParallel (rowwise, embedding_rowwise): its output, partial sums, is all-reduced in forward; with a
  replicated input (rowwise_rep, rowwise_split_input) that input is cut locally and its gradient all-gathered in
  backward.

Each planned layer's parameters are held split on every tp rank (column-wise: rows, row-wise: columns; a
row-wise embedding its rows; a row-wise layer's bias whole), which is what FSDP2 then shards over the
dp_shard processes (`_local_parameters`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel

from accel.parallel.tensor_plan import Plan

AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class TensorParallelStep:
    """What tensor parallelism hands to collectives over the tp group in one micro-batch (forward and backward)."""

    all_reduce: int
    all_gather: int


@dataclass(frozen=True)
class _Seen:
    """A planned layer's first input and its output, as the fake forward made them: (elements, bytes an element)."""

    input: tuple[int, int]
    output: tuple[int, int]


def _plan_styles(model: nn.Module, tp_size: int, tp_plan: Plan | None) -> dict[str, ParallelStyle]:
    """The plan accel would apply to `model` at `tp_size`: concrete module names -> torch styles (checked)."""
    from accel.parallel.tensor_plan import choose_plan, resolve_plan

    plan, given = choose_plan(model, tp_plan)
    return resolve_plan(model, plan, tp_size, given)


def _local_parameters(model: nn.Module, styles: Mapping[str, ParallelStyle], tp_size: int) -> list[nn.Parameter]:
    """Each parameter of `model` (tied ones once) as one tp rank holds it: a meta parameter of its local shape."""
    split: dict[int, tuple[int, ...]] = {}
    for name, style in styles.items():
        module = model.get_submodule(name)
        dim = 0 if isinstance(style, ColwiseParallel) == isinstance(module, nn.Linear) else 1
        for attribute, parameter in module.named_parameters(recurse=False):
            if attribute == "bias" and dim == 1:
                continue  # a row-wise layer's bias is replicated
            shape = list(parameter.shape)
            shape[dim if parameter.dim() > 1 else 0] //= tp_size
            split[id(parameter)] = tuple(shape)
    return [nn.Parameter(torch.empty(split.get(id(p), p.shape), dtype=p.dtype, device="meta"),
                         requires_grad=p.requires_grad) for p in model.parameters()]


def _tensor_parallel_step(model: nn.Module, styles: Mapping[str, ParallelStyle], precision: str, batch_size: int,
                         seq_len: int, sharded: bool) -> TensorParallelStep:
    """The activation collectives of one micro-batch (see the module's docstring); `sharded`: under FSDP2."""
    seen = _forward(model, set(styles), precision, batch_size, seq_len, sharded)
    reduce = gather = 0
    for name, style in styles.items():
        inputs, outputs = (n * size for n, size in (seen[name].input, seen[name].output))
        integer_input = isinstance(model.get_submodule(name), nn.Embedding)
        if isinstance(style, ColwiseParallel):
            reduce += 0 if integer_input else inputs
            gather += outputs if _is(style.output_layouts, Replicate) else 0
        elif isinstance(style, RowwiseParallel):
            reduce += outputs if _is(style.output_layouts, Replicate) else 0
            gather += inputs if _is(style.input_layouts, Replicate) and not integer_input else 0
    return TensorParallelStep(reduce, gather)


def _is(layouts: Any, kind: type) -> bool:
    first = layouts[0] if isinstance(layouts, tuple) else layouts
    return isinstance(first, kind)


def _forward(model: nn.Module, names: set[str], precision: str, batch_size: int, seq_len: int,
             sharded: bool) -> dict[str, _Seen]:
    """The planned layers' first inputs and outputs in a forward of the whole `model` on fake tensors."""
    seen, named = {}, {id(model.get_submodule(name)): name for name in names}

    def record(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if id(module) in named:
            first = next(a for a in args if isinstance(a, torch.Tensor))
            out = output[0] if isinstance(output, tuple) else output
            seen[named[id(module)]] = _Seen((first.numel(), first.element_size()), (out.numel(), out.element_size()))

    from accel.estimate.training import PRECISIONS

    # the weights' dtype: a -true precision's own; FSDP2's param_dtype under mixed precision; else the model's
    weights = PRECISIONS[precision] if precision.endswith("-true") else AUTOCAST.get(precision) if sharded else None
    _fake_forward(model, precision, batch_size, seq_len, weights, lambda module, args: None, record)
    return seen


def _fake_forward(model: nn.Module, precision: str, batch_size: int, seq_len: int, weights: torch.dtype | None,
                  before: Callable[[nn.Module, tuple[Any, ...]], None],
                  after: Callable[[nn.Module, tuple[Any, ...], Any], None]) -> None:
    """Run `model`'s forward and loss (activations.py's) on fake tensors, for `batch_size` x `seq_len` token ids,
    calling `before` and `after` around every module's forward (its positional arguments; its output); floating
    parameters in `weights` (None: their own dtype), under autocast for bf16 / fp16. The model's parameters and
    buffers are put back afterwards."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from accel.estimate.activations import _loss

    mode, cpu = FakeTensorMode(), torch.device("cpu")
    saved = [(module, dict(module._parameters), dict(module._buffers)) for module in model.modules()]
    with ExitStack() as stack:
        stack.callback(_restore, saved)
        for module, parameters, buffers in saved:
            for key, parameter in parameters.items():
                if parameter is not None:
                    meta = parameter.detach().to("meta", weights if weights and parameter.is_floating_point() else None)
                    fake = mode.fake_tensor_converter.from_meta_and_device(mode, meta, cpu)
                    module._parameters[key] = nn.Parameter(fake, requires_grad=parameter.requires_grad)
            for key, buffer in buffers.items():
                if buffer is not None:
                    module._buffers[key] = mode.fake_tensor_converter.from_meta_and_device(mode, buffer.to("meta"), cpu)
            stack.enter_context(module.register_forward_pre_hook(before))
            stack.enter_context(module.register_forward_hook(after))
        stack.enter_context(torch.device("cpu"))
        stack.enter_context(mode)
        if precision in AUTOCAST:
            stack.enter_context(torch.autocast("cpu", dtype=AUTOCAST[precision]))
        _loss(model, torch.zeros(batch_size, seq_len, dtype=torch.long))


def _restore(saved: list[tuple[nn.Module, dict[str, Any], dict[str, Any]]]) -> None:
    for module, parameters, buffers in saved:
        module._parameters.update(parameters)
        module._buffers.update(buffers)
