"""Launched by test_sequence_parallel.py: a tiny transformers Llama trained with the sequence split over sp_size
ranks (Ulysses, sp_backend "torch"), through a prepared DataLoader of padded rows, `model(**batch).loss`. argv:
sp_size, dp_shard_size (> 1: FSDP2 over dp_shard x sp), dp_replicate_size (> 1: DDP), steps. One process with
sp_size 1 is the reference: the same global batches, whole sequences."""

from __future__ import annotations

import sys

import torch
from launching import report
from tensor_tiny import make_llama
from torch.utils.data import DataLoader

from accel import Accelerator, ParallelismConfig
from accel.utils import FullyShardedDataParallelPlugin

GLOBAL_BATCH, LENGTH = 4, 31


def rows(count: int) -> list[dict[str, torch.Tensor]]:
    """Token rows padded on the right (a row's last `pad` positions: id 0, mask 0, label -100). Each half of a global
    batch, taken as consecutive or alternate rows, has as many targets as the other: the data-parallel mean of
    the halves' mean losses is then the one process's mean over the whole batch."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for index in range(count):
        ids = torch.randint(1, 64, (LENGTH,), generator=generator)
        pad = (0, 4, 4, 0)[index % 4]
        mask = torch.ones(LENGTH, dtype=torch.long)
        if pad:
            ids[-pad:], mask[-pad:] = 0, 0
        out.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return out


def main() -> None:
    sp_size, dp_shard, dp_replicate, steps = (int(arg) for arg in sys.argv[1:5])
    sizes = {"sp_size": sp_size, "dp_shard_size": dp_shard, "dp_replicate_size": dp_replicate} if sp_size > 1 else None
    accelerator = Accelerator(
        cpu=True, parallelism_config=ParallelismConfig(**sizes) if sizes else None,
        fsdp_plugin=FullyShardedDataParallelPlugin() if dp_shard > 1 else None,
    )
    model = make_llama()
    model.config._attn_implementation = "sdpa"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    places = accelerator.num_processes // sp_size
    loader = DataLoader(rows(GLOBAL_BATCH * steps), batch_size=GLOBAL_BATCH // places)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses, shapes = [], set()
    for batch in loader:
        shapes.add(tuple(batch["input_ids"].shape))
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), reduction="mean").item())
    report("losses", losses)
    report("shapes", sorted(shapes))
    report("keys", sorted(batch))


if __name__ == "__main__":
    main()
