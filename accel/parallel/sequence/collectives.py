"""The two differentiable collectives Ulysses needs over the sequence-parallel group, on torch.distributed's
plain collectives (gloo, nccl: whatever the group runs).

`heads_to_sequence` turns this rank's slice of the sequence with every head into every position of the
sequence with this rank's share of the heads (before attention); `sequence_to_heads` is its inverse (after
attention). Each is the other's backward, so gradients go back the way the activations came. `sum_over`
adds a scalar over the group in forward and adds the gradients over the group in backward: every rank's
copy of the summed loss sends its gradient to every rank's part of it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _exchange(chunks: torch.Tensor, group: Any) -> torch.Tensor:
    """all_to_all over dimension 0 of `chunks` (one chunk per rank: chunk i goes to rank i, and the result's
    chunk i came from rank i)."""
    chunks = chunks.contiguous()
    received = torch.empty_like(chunks)
    dist.all_to_all_single(received, chunks, group=group)
    return received


def _heads_to_sequence(x: torch.Tensor, group: Any, ranks: int) -> torch.Tensor:
    """[batch, heads, local positions, dim] -> [batch, heads / ranks, all positions, dim]."""
    batch, heads, length, dim = x.shape
    chunks = x.reshape(batch, ranks, heads // ranks, length, dim).transpose(0, 1)  # [rank, b, h/r, s/r, d]
    received = _exchange(chunks, group)  # chunk i: rank i's positions of this rank's heads
    return received.permute(1, 2, 0, 3, 4).reshape(batch, heads // ranks, ranks * length, dim)


def _sequence_to_heads(x: torch.Tensor, group: Any, ranks: int) -> torch.Tensor:
    """[batch, all positions, heads / ranks, dim] -> [batch, local positions, heads, dim]."""
    batch, length, heads, dim = x.shape
    chunks = x.reshape(batch, ranks, length // ranks, heads, dim).transpose(0, 1)  # [rank, b, s/r, h/r, d]
    received = _exchange(chunks, group)  # chunk i: this rank's positions of rank i's heads
    return received.permute(1, 2, 0, 3, 4).reshape(batch, length // ranks, ranks * heads, dim)


class _HeadsToSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, ranks: int) -> torch.Tensor:
        ctx.group, ctx.ranks = group, ranks
        return _heads_to_sequence(x, group, ranks)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # the inverse layout: [b, h/r, s, d] -> [b, s, h/r, d] -> back to [b, s/r, h, d] -> [b, h, s/r, d]
        return _sequence_to_heads(grad.transpose(1, 2), ctx.group, ctx.ranks).transpose(1, 2), None, None


class _SequenceToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, ranks: int) -> torch.Tensor:
        ctx.group, ctx.ranks = group, ranks
        return _sequence_to_heads(x, group, ranks)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _heads_to_sequence(grad.transpose(1, 2), ctx.group, ctx.ranks).transpose(1, 2), None, None


class _SumOver(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        total = x.detach().clone()
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        total = grad.contiguous().clone()
        dist.all_reduce(total, group=ctx.group)
        return total, None


def heads_to_sequence(x: torch.Tensor, group: Any, ranks: int) -> torch.Tensor:
    """Query, key or value as attention needs them under Ulysses: `x` is [batch, heads, local positions, dim]
    (transformers' layout), the result [batch, heads / ranks, all positions, dim] (positions in rank order).

    Args:
        x: This rank's positions of every head.
        group: The sequence-parallel process group.
        ranks: Its size (divides the number of heads).
    """
    return _HeadsToSequence.apply(x, group, ranks)


def sequence_to_heads(x: torch.Tensor, group: Any, ranks: int) -> torch.Tensor:
    """Attention's output back to this rank's positions: [batch, all positions, heads / ranks, dim] (what
    transformers' attention functions return) -> [batch, local positions, heads, dim].

    Args:
        x: Every position of this rank's heads.
        group: The sequence-parallel process group.
        ranks: Its size.
    """
    return _SequenceToHeads.apply(x, group, ranks)


def sum_over(x: torch.Tensor, group: Any) -> torch.Tensor:
    """`x` summed over `group`, differentiably (the gradient of each rank's part is the sum of every rank's).

    Args:
        x: A tensor every rank of the group holds (this rank's part of a sum).
        group: The process group.
    """
    return _SumOver.apply(x, group)
