"""Which activations a checkpointed block keeps: all recomputed ("full"), torchtitan's per-op selection
("selective"), or a memory budget (some blocks not checkpointed at all).

Selective checkpointing (torchtitan's op policy, torch's `create_selective_checkpoint_contexts`): inside a
checkpointed block, the outputs of the expensive ops are kept from forward to backward and everything else is
recomputed: matrix products (but every second one, which is recomputed: half their memory for a quarter of the
block's recompute), attention, the reductions FP8 scaling takes (max) and the collectives of sharded layouts.
The elementwise ops, norms and activations, cheap to recompute and together most of a block's activation
memory, are recomputed. The counting restarts in every forward and in every recompute, so both choose the same
products.

A memory budget b (0 to 1) checkpoints the blocks fully but leaves about the fraction b of them, evenly spread,
unchecked: their activations are kept whole (0 is full checkpointing of every block). torchtitan's own
`memory_budget` is a parameter of torch.compile's partitioner; this one needs no compiler.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

_aten = torch.ops.aten
_PRODUCTS = frozenset({_aten.mm.default, _aten.addmm.default, _aten.bmm.default})
"""The matrix products, of which every second one is recomputed."""


@functools.cache
def _kept_ops() -> frozenset[Any]:
    """The ops whose outputs are kept (the products as well, every second one): built on first use, as some exist
    only on some builds of torch."""
    names = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu", "max")
    kept = {getattr(_aten, name).default for name in names if hasattr(_aten, name)}
    functional = getattr(torch.ops, "_c10d_functional", None)
    for name in ("reduce_scatter_tensor", "all_reduce", "all_gather_into_tensor"):
        if functional is not None and hasattr(functional, name):
            kept.add(getattr(functional, name).default)
    return frozenset(kept | _PRODUCTS)


def _policy(counts: dict[str, int]) -> Callable[..., CheckpointPolicy]:
    kept = _kept_ops()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if op in _PRODUCTS:
            mode = "recompute" if ctx.is_recompute else "forward"
            counts[mode] += 1
            if counts[mode] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if op in kept else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def selective_context() -> tuple[Any, Any]:
    """The (forward, recompute) contexts of one checkpointed call (torch's `context_fn`), with fresh counts."""
    return create_selective_checkpoint_contexts(_policy(collections.Counter()))


def within_budget(blocks: Sequence[Any], budget: float) -> list[Any]:
    """The blocks to checkpoint under a memory budget: all but about `budget` of them, the unchecked ones evenly
    spread (torchtitan's "every n-th layer", by fraction).

    Args:
        blocks: The blocks, in order.
        budget: The fraction of blocks whose activations are kept (0: checkpoint all, 1: none).

    >>> within_budget(list("abcd"), 0.5)
    ['b', 'd']
    >>> within_budget(list("abcd"), 0.0), within_budget(list("abcd"), 1.0)
    (['a', 'b', 'c', 'd'], [])
    """
    checked = round((1 - budget) * len(blocks))
    return [block for index, block in enumerate(blocks)
            if (index + 1) * checked // len(blocks) > index * checked // len(blocks)]
