"""A prepared dataloader's position in its epochs: the RNG states that decide an epoch's order
(captured as it starts, replayed on resume) and the checks on a position loaded from a checkpoint."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset


def length(loader: DataLoader[Any]) -> float:
    """len(loader), or infinity when it has none (an IterableDataset without __len__)."""
    try:
        return len(loader)
    except TypeError:
        return float("inf")


def generators(loader: DataLoader[Any]) -> list[torch.Generator]:
    """The torch.Generators that decide the loader's order: its own, its sampler's, its batch
    sampler's sampler's, and an IterableDataset's `generator` (each once)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    candidates = [
        getattr(loader, "generator", None),
        getattr(getattr(loader, "sampler", None), "generator", None),
        getattr(getattr(batch_sampler, "sampler", None), "generator", None),
    ]
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, IterableDataset):  # an iterable dataset that shuffles with its own generator
        inner = getattr(dataset, "dataset", None)  # under an IterableDatasetShard
        candidates.append(getattr(inner if isinstance(inner, IterableDataset) else dataset, "generator", None))
    found: list[torch.Generator] = []
    for generator in candidates:
        if isinstance(generator, torch.Generator) and not any(generator is g for g in found):
            found.append(generator)
    return found


def adopt_generator(loader: DataLoader[Any], saved: int) -> None:
    """Give the loader's shuffling sampler a torch.Generator when a saved position holds one more than the
    loader has and the sampler's `generator` is None: with several processes, prepare gives such a sampler
    one (as Accelerate does), so a checkpoint saved there also loads in one process, which does not."""
    if saved != len(generators(loader)) + 1:
        return
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if sampler is not None and hasattr(sampler, "generator") and sampler.generator is None:
            sampler.generator = torch.Generator()
            return


def capture_rng(loader: DataLoader[Any]) -> dict[str, Any]:
    """The global torch RNG state and that of each of the loader's generators."""
    return {"torch": torch.get_rng_state(), "generators": [g.get_state() for g in generators(loader)]}


def apply_rng(loader: DataLoader[Any], rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    for generator, state in zip(generators(loader), rng["generators"]):
        generator.set_state(state)


def check_position(state: Any, generators: int) -> None:
    """Raise ValueError unless `state` is a position from `state_dict()` for a loader like this one."""
    if not isinstance(state, dict) or set(state) != {"epoch", "batch", "rng"}:
        raise ValueError(
            f"PreparedDataLoader.load_state_dict got {state!r}; expected the dict state_dict() returns, "
            "with keys 'epoch', 'batch' and 'rng'."
        )
    if not all(isinstance(state[key], int) and state[key] >= 0 for key in ("epoch", "batch")):
        raise ValueError(f"PreparedDataLoader.load_state_dict: 'epoch' and 'batch' must be ints >= 0, got {state!r}.")
    rng = state["rng"]
    if rng is None:
        return
    if not isinstance(rng, dict) or set(rng) != {"torch", "generators"} or not isinstance(rng["generators"], list):
        raise ValueError(
            f"PreparedDataLoader.load_state_dict: 'rng' must be None or a dict with 'torch' and a list of "
            f"'generators', as state_dict() returns; got {rng!r:.200}."
        )
    if rng["torch"] is None and state["batch"] != 0:
        raise ValueError(
            f"PreparedDataLoader.load_state_dict: a position inside an epoch (batch {state['batch']}) needs its "
            "'torch' RNG state, which is None."
        )
    saved = len(rng["generators"])
    if saved != generators:
        raise ValueError(
            f"the saved dataloader position was taken with {saved} torch.Generator(s) deciding the order "
            f"(DataLoader(generator=...) or the sampler's), but this DataLoader has {generators}. Build the "
            "DataLoader as in the saved run, so that the epoch can be replayed in the same order."
        )
