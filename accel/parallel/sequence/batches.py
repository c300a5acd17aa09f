"""One rank's slice of a batch's sequence, with what a slice needs to give the whole sequence's loss.

Every rank of a sequence-parallel group gets the same batch from the dataloader (they share a data-parallel
place); `shard_sequence` cuts it along dimension 1 into `ranks` contiguous slices and keeps this rank's.
Before cutting, what a slice cannot know on its own is fixed on the whole sequence:

* `shift_labels`: each position's target is the next position's label (what transformers' causal-LM loss
  computes by shifting; shifting a slice would lose the target across each cut). `labels` is replaced by it,
  as DeepSpeed's Ulysses adapter does; the model's loss (accel.parallel.sequence.loss) reads it.
* `position_ids`: the positions in the whole sequence (a slice would count from 0), from the batch when it
  has them (one run 0..n-1 per row: packed rows are refused) or made here.
* the length is padded to a multiple of `ranks`: pad tokens at the end, their targets -100, so they change
  no loss and, being last, no earlier position's causal attention.
* `attention_mask` is checked and left out: padding on the right only (causal attention never looks right,
  so the real tokens are computed exactly) with -100 targets at padded positions; the attention then masks
  causally by flag over the whole sequence (attention.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

IGNORE = -100
"""transformers' label for "no loss here"."""


def shard_sequence(batch: Any, rank: int, ranks: int) -> dict[str, Any]:
    """This rank's slice of `batch` (module docstring).

    Args:
        batch: A mapping with `input_ids` [batch, sequence] (and optionally `labels`, `position_ids`,
            `attention_mask`, other [batch, sequence, ...] tensors, which are cut the same way).
        rank: This process's rank in the sequence-parallel group.
        ranks: The group's size (sp_size).

    Returns:
        A dict with the same keys but `labels` (replaced by `shift_labels`) and `attention_mask` (checked),
        and `position_ids`; every tensor of the sequence's length cut to this rank's slice.
    """
    if not isinstance(batch, Mapping) or not isinstance(batch.get("input_ids"), torch.Tensor):
        raise TypeError(
            f"ParallelismConfig(sp_size={ranks}) shards each batch's sequence, and needs batches that are mappings with "
            f"an `input_ids` tensor [batch, sequence]; this dataloader gave a {type(batch).__name__}. Return dicts from "
            "the dataset or collator (transformers' collators do)."
        )
    ids = batch["input_ids"]
    rows, length = ids.shape[:2]
    pad = -length % ranks
    out: dict[str, Any] = {}
    for name, value in batch.items():
        if name in ("labels", "attention_mask", "position_ids", "shift_labels"):
            continue
        out[name] = _pad(value, length, pad, 0) if _along_sequence(value, rows, length) else value
    mask = batch.get("attention_mask")
    labels = _shift_labels(batch, length, mask, ranks)
    if labels is not None:
        out["shift_labels"] = F.pad(labels, (0, pad), value=IGNORE)
    out["position_ids"] = _positions(batch.get("position_ids"), rows, length + pad, ids.device, ranks)
    piece = (length + pad) // ranks
    start = rank * piece
    return {name: value[:, start:start + piece].contiguous() if _along_sequence(value, rows, length + pad) else value
            for name, value in out.items()}


def _along_sequence(value: Any, rows: int, length: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[0] == rows and value.shape[1] == length


def _pad(value: torch.Tensor, length: int, pad: int, fill: int) -> torch.Tensor:
    if not pad:
        return value
    widths = [0, 0] * (value.dim() - 2) + [0, pad]
    return F.pad(value, widths, value=fill)


def _shift_labels(batch: Mapping[str, Any], length: int, mask: Any, ranks: int) -> torch.Tensor | None:
    """The next position's label at each position (-100 at the end), for the whole sequence."""
    if batch.get("shift_labels") is not None:
        labels = batch["shift_labels"]
    elif batch.get("labels") is not None:
        labels = F.pad(batch["labels"][:, 1:], (0, 1), value=IGNORE)
    else:
        labels = None
    if mask is not None:
        _check_mask(mask, batch.get("labels"), ranks)
    return labels


def _check_mask(mask: torch.Tensor, labels: Any, ranks: int) -> None:
    """Padding on the right only, with -100 labels where it pads."""
    mask = mask.bool()
    if mask.dim() != 2 or bool((mask[:, 1:] > mask[:, :-1]).any()):
        raise ValueError(
            f"ParallelismConfig(sp_size={ranks}): the batch's attention_mask pads on the left (or is not [batch, "
            "sequence]); sequence parallelism masks causally over the whole sequence, which is exact only for padding "
            "on the right. Pad on the right (tokenizer.padding_side = 'right'), or pack rows without padding."
        )
    if labels is not None and bool((labels[~mask] != IGNORE).any()):
        raise ValueError(
            f"ParallelismConfig(sp_size={ranks}): the batch has labels other than -100 at padded positions "
            "(attention_mask 0); sequence parallelism leaves the mask out, so those positions would be computed "
            "differently. Give them -100 labels (transformers' collators do)."
        )


def _positions(given: Any, rows: int, length: int, device: torch.device, ranks: int) -> torch.Tensor:
    """0..length-1 for each row; a batch's own position_ids must be exactly that (up to its unpadded length)."""
    positions = torch.arange(length, device=device).expand(rows, length)
    if given is not None:
        width = given.shape[-1]
        if not torch.equal(given.expand(rows, width), positions[:, :width].to(given.dtype)):
            raise ValueError(
                f"ParallelismConfig(sp_size={ranks}): the batch's position_ids are not 0..n-1 in each row (packed "
                "sequences?); sequence parallelism masks the whole row causally, which would let packed documents "
                "attend to each other. Give one sequence per row (padding on the right)."
            )
    return positions
