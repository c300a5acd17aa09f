"""Gradient accumulation: which micro-batches end with an optimizer step."""

from __future__ import annotations


class GradientState:
    """Shared by the Accelerator, its optimizers, schedulers and dataloaders.

    `sync_gradients` is True on the micro-batch that completes an accumulation window (and on
    the last batch of a prepared dataloader, unless `sync_with_dataloader` is False); the
    optimizer, scheduler and `zero_grad` act only then.
    """

    __slots__ = ("num_steps", "step", "sync_gradients", "end_of_dataloader", "sync_with_dataloader")

    def __init__(self, num_steps: int, sync_with_dataloader: bool = True) -> None:
        self.num_steps = num_steps
        self.sync_with_dataloader = sync_with_dataloader
        """False: the last batch of a dataloader does not end the window (GradientAccumulationPlugin)."""
        self.step = 0
        self.sync_gradients = True
        self.end_of_dataloader = False

    def advance(self) -> bool:
        """Count one micro-batch and decide whether it syncs; returns `sync_gradients`."""
        self.step += 1
        if (self.end_of_dataloader and self.sync_with_dataloader) or self.step >= self.num_steps:
            self.step = 0
            self.sync_gradients = True
        else:
            self.sync_gradients = False
        return self.sync_gradients
