"""The whole sequence's loss from each rank's slice, as `outputs.loss` of the prepared model.

Each rank has the logits of its slice only. A forward pre-hook takes the batch's `shift_labels` (batches.py)
out of the call, so the model computes no loss of its own (a slice's shift would lose the target across each
cut); the forward hook computes the slice's part of the mean with the model's own loss function (summed
cross-entropy over the slice, divided by the valid targets of the whole sequence: a count added over the
group) and adds the parts over the group, differentiably. Every rank then holds the loss one process gets
from the whole sequence, and backward through that sum gives each rank's slice the gradient of the whole
loss; the data-parallel reduction (DDP's all-reduce, FSDP2's reduce-scatter, both averaging over the
sequence ranks too) then leaves every rank with the gradient of the mean loss.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from accel.parallel.sequence.batches import IGNORE
from accel.parallel.sequence.collectives import sum_over


@dataclasses.dataclass
class SequenceLoss:
    """The hooks' shared state for one model (the targets of the call under way).

    Args:
        group: The sequence-parallel process group.
        ranks: Its size.
        vocab_size: The model's vocabulary size (what its loss function is given).
    """

    group: Any
    ranks: int
    vocab_size: int | None
    pending: torch.Tensor | None = None

    def attach(self, model: nn.Module) -> None:
        """Register the two hooks on `model`.

        Args:
            model: The transformers model given to prepare.
        """
        model.register_forward_pre_hook(self.before, with_kwargs=True)
        model.register_forward_hook(self.after, with_kwargs=True)

    def before(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Take the targets out of the call; refuse a call that would be silently wrong on a slice."""
        sp = f"ParallelismConfig(sp_size={self.ranks})"
        if kwargs.get("labels") is not None:
            raise ValueError(
                f"{sp}: the model was called with labels; under sequence parallelism each rank holds a slice of the "
                "sequence, and its loss needs the targets across the cuts: the prepared dataloader's batches carry "
                "them as `shift_labels` (and no `labels`). Call model(**batch), or pass shift_labels=batch['shift_labels']."
            )
        if kwargs.get("position_ids") is None or len(args) > 1:
            raise ValueError(
                f"{sp}: the model was called without position_ids (by keyword); each rank's slice starts in the middle of "
                "the sequence, and without them the model would number it from 0. Call model(**batch), or pass "
                "position_ids=batch['position_ids'] (the prepared dataloader's batches carry them)."
            )
        self.pending = kwargs.pop("shift_labels", None)
        return args, kwargs

    def after(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        """The output with the whole sequence's loss (the output unchanged when the call had no targets)."""
        targets, self.pending = self.pending, None
        if targets is None:
            return output
        logits = output["logits"] if isinstance(output, dict) else output[0]
        counted = (targets != IGNORE).sum()
        dist.all_reduce(counted, group=self.group)
        loss_function: Any = model.loss_function
        part = loss_function(logits=logits, labels=None, vocab_size=self.vocab_size, shift_labels=targets,
                             num_items_in_batch=counted)
        return _with_loss(output, sum_over(part, self.group))


def _with_loss(output: Any, loss: torch.Tensor) -> Any:
    """`output` with `loss` first, as transformers puts it (a ModelOutput rebuilt, a tuple extended)."""
    if isinstance(output, dict):
        return type(output)(**{**output, "loss": loss})
    return (loss, *output)
