"""PreparedDataLoader: batches on the right device, and the end of an epoch made visible."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from accel._tree import map_tensors
from accel.accelerator.gradient_state import GradientState


class PreparedDataLoader:
    """Iterates the user's DataLoader, moving each batch to the device.

    It looks one batch ahead so that the last batch of an epoch is known while it is being
    used: gradient accumulation then syncs on it instead of carrying a partial window into
    the next epoch.
    """

    def __init__(self, loader: DataLoader[Any], device: torch.device, gradients: GradientState, place: bool):
        self.loader = loader
        self.device = device
        self._gradients = gradients
        self._place = place and device.type != "cpu"

    def __iter__(self) -> Iterator[Any]:
        gradients = self._gradients
        gradients.end_of_dataloader = False
        batches = iter(self.loader)
        try:
            current = next(batches)
        except StopIteration:
            return
        for upcoming in batches:
            yield self._to_device(current)
            current = upcoming
        gradients.end_of_dataloader = True
        try:
            yield self._to_device(current)
        finally:
            gradients.end_of_dataloader = False

    def __len__(self) -> int:
        return len(self.loader)

    def _to_device(self, batch: Any) -> Any:
        if not self._place:
            return batch
        return map_tensors(lambda t: t.to(self.device, non_blocking=True), batch)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"PreparedDataLoader({self.loader!r}, device={self.device})"
