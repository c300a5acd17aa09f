"""Shuffled epochs with 2 real processes, run by test_sampler_epochs.py under `accel launch --num_processes 2 --cpu`.

For each way of shuffling (the DataLoader's own generator, the global RNG), each rank seeds its
RNGs differently (process 0's order must win), prepares a shuffled DataLoader of SAMPLES samples
in batches of BATCH, and reports the batches of EPOCHS epochs and a fingerprint of its generator
after each epoch. `reference` gives what one process of batch 2 x BATCH sees with torch alone.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import torch
from launching import report
from torch.utils.data import DataLoader

from accel import Accelerator

SAMPLES, BATCH, EPOCHS, SEED = 13, 3, 4, 3


def loader(batch_size: int, generator: bool, seed: int) -> DataLoader[Any]:
    options = {"generator": torch.Generator().manual_seed(seed)} if generator else {}
    return DataLoader(list(range(SAMPLES)), batch_size=batch_size, shuffle=True, **options)


def fingerprint(generator: torch.Generator | None) -> str:
    state = generator.get_state() if generator is not None else torch.get_rng_state()
    return hashlib.sha256(bytes(state.tolist())).hexdigest()[:16]


def reference(generator: bool) -> tuple[list[list[list[int]]], list[str]]:
    """Torch alone, one process of batch 2 x BATCH: each epoch's batches, and the generator after it."""
    torch.manual_seed(SEED)
    plain = loader(2 * BATCH, generator, SEED)
    if not generator:  # as Accelerate, prepare gives the sampler a generator seeded from (process 0's) global RNG
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        plain.sampler.generator = torch.Generator().manual_seed(seed)  # type: ignore[attr-defined]  # a RandomSampler
    epochs, prints = [], []
    for _ in range(EPOCHS):
        epochs.append([batch.tolist() for batch in plain])
        prints.append(fingerprint(plain.generator))
    return epochs, prints


def main() -> None:
    rank = int(os.environ["RANK"])
    for generator in (True, False):
        accelerator = Accelerator()
        torch.manual_seed(SEED + 100 * rank)  # the processes' RNGs differ: process 0's order is used
        prepared = accelerator.prepare(loader(BATCH, generator, SEED + 100 * rank))
        epochs, prints = [], []
        for _ in range(EPOCHS):
            epochs.append([batch.tolist() for batch in prepared])
            prints.append(fingerprint(prepared.loader.generator))
        name = "generator" if generator else "global"
        report(f"{name}_epochs", epochs)
        report(f"{name}_fingerprints", prints)


if __name__ == "__main__":
    main()
