"""Activation memory of one micro-batch, measured by running the model's forward on fake tensors.

The model (built on the meta device) gets fake CPU parameters (torch's FakeTensorMode: shapes,
dtypes and the kernels' choices, no memory), runs forward and its loss on a micro-batch of token
ids, and every tensor autograd saves for backward is counted once (by storage), parameters left
out: the activations held when backward starts, their peak. Attention runs as the CPU's fused
kernel saves it (a log-sum-exp per row, not the sequence-by-sequence matrix), as CUDA's flash and
memory-efficient kernels do.

With activation checkpointing of the model's blocks (accel's `activation_checkpointing`, the same
blocks: training/blocks.py), what is held is what lies outside the blocks, each block's input, and
during backward one block's activations recomputed: the largest block's is added.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from accel.estimate.training import PRECISIONS

AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ActivationBytes:
    """Activation bytes of one micro-batch on one rank."""

    saved: int
    """Held for backward when it starts, without checkpointing."""
    checkpointed: int | None
    """The peak with the model's blocks checkpointed, or None where the model has no blocks accel finds."""


class _Counter:
    """Counts the storages autograd saves, each once, outside the parameters; by the block running."""

    def __init__(self, parameters: set[int]) -> None:
        self.parameters = parameters
        self.seen: set[int] = set()
        self.block: int | None = None
        self.by_block: dict[int | None, int] = {None: 0}
        self.block_inputs = 0

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in self.parameters and key not in self.seen:
            self.seen.add(key)
            self.by_block[self.block] = self.by_block.get(self.block, 0) + storage.nbytes()
        return tensor

    def enter(self, index: int, inputs: tuple[Any, ...]) -> None:
        self.block = index
        self.block_inputs += sum(t.untyped_storage().nbytes() for t in inputs if isinstance(t, torch.Tensor))


def activation_bytes(model: nn.Module, batch_size: int, seq_len: int, precision: str = "no") -> ActivationBytes:
    """Activation bytes of a micro-batch of `batch_size` sequences of `seq_len` token ids.

    Replaces `model`'s parameters and buffers by fake ones (build it on the meta device for this).

    Args:
        model: a language model taking token ids (transformers' models get `labels` and compute their
            loss; any other: cross-entropy of 3-D logits, else the output's sum).
        batch_size: sequences per micro-batch on one rank.
        seq_len: tokens per sequence.
        precision: "no", "fp16"/"bf16" (autocast), "bf16-true", "16-true" or "64-true".

    Example:
        >>> from accel.bench.gpt import GPT, GPTConfig
        >>> with torch.device("meta"):
        ...     model = GPT(GPTConfig())
        >>> activation_bytes(model, 8, 64).saved  # the example GPT's 8x64 micro-batch in fp32
        17572356
    """
    if precision not in PRECISIONS or precision.startswith("fp8"):
        accepted = ", ".join(name for name in PRECISIONS if not name.startswith("fp8"))
        raise ValueError(f"precision={precision!r}: activations are not estimated for it; accepted: {accepted}")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from accel.training.blocks import find_blocks

    mode = FakeTensorMode()
    _make_fake(model, mode, PRECISIONS[precision] if precision.endswith("-true") else None)
    try:
        blocks = find_blocks(model, None, "activation estimate")
    except ValueError:
        blocks = []
    counter = _Counter({p.untyped_storage()._cdata for p in [*model.parameters(), *model.buffers()]})
    handles = [block.register_forward_pre_hook(lambda m, args, i=i: counter.enter(i, args)) for i, block in
               enumerate(blocks)]
    handles += [block.register_forward_hook(lambda m, args, out: setattr(counter, "block", None)) for block in blocks]
    autocast = (torch.autocast("cpu", dtype=AUTOCAST[precision]) if precision in AUTOCAST
                else contextlib.nullcontext())
    try:
        # the CPU as the default device: a caller inside `torch.device("meta")` would put the inputs there
        with torch.device("cpu"), mode, torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t), autocast:
            _loss(model, torch.zeros(batch_size, seq_len, dtype=torch.long))
    finally:
        for handle in handles:
            handle.remove()
    saved = sum(counter.by_block.values())
    inside = [size for index, size in counter.by_block.items() if index is not None]
    checkpointed = counter.by_block[None] + counter.block_inputs + max(inside) if inside else None
    return ActivationBytes(saved, checkpointed)


def _make_fake(model: nn.Module, mode: Any, dtype: torch.dtype | None) -> None:
    """Every parameter and buffer of `model` a fake CPU tensor of its shape (floating ones in `dtype`)."""
    cpu = torch.device("cpu")
    for module in model.modules():
        for name, parameter in list(module._parameters.items()):
            if parameter is not None:
                meta = parameter.detach().to("meta", dtype if dtype and parameter.is_floating_point() else None)
                fake = mode.fake_tensor_converter.from_meta_and_device(mode, meta, cpu)
                module._parameters[name] = nn.Parameter(fake, requires_grad=parameter.requires_grad)
        for name, buffer in list(module._buffers.items()):
            if buffer is not None:
                module._buffers[name] = mode.fake_tensor_converter.from_meta_and_device(mode, buffer.to("meta"), cpu)


def _loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    if hasattr(model, "config") and hasattr(model, "can_generate"):  # transformers: its own loss from labels
        return model(input_ids=ids, labels=ids).loss
    out = model(ids)
    if out.is_floating_point() and out.dim() == 3:
        return F.cross_entropy(out.flatten(0, 1).float(), ids.flatten())
    return out.float().sum()
