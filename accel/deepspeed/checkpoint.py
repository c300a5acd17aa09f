"""DeepSpeed's checkpoints inside accel's: the engine writes its ZeRO files (tag `shards`) into the checkpoint's
`shards/` folder, each process its own partitions; accel's manifest lists them and keeps the rest (schedulers,
dataloader positions, RNG states). Loading runs the engine's `load_checkpoint`, which restores the weights, the
optimizer's state (fp32 masters, fp16 loss scale) and the engine's step counts. A run without deepspeed_plugin
refuses these checkpoints, and a DeepSpeed run refuses torch.distributed.checkpoint's shards, both for the reasons
given here. Also: the full weights of an engine's model (gathered under ZeRO 3) and loading full weights into it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from accel.checkpointing import layout
from accel.checkpointing.errors import CheckpointError

if TYPE_CHECKING:
    from accel.checkpointing.manifest import Manifest

TAG = layout.SHARDS_DIR
"""The engine's checkpoint tag: the folder its files go to, beside accel's (checkpoint/shards/*.pt)."""
_RECOVERY = "zero_to_fp32.py"
"""The script DeepSpeed copies beside its checkpoints (it rebuilds fp32 weights); moved into shards/."""
INDEX = ".metadata"
"""The index file every sharded checkpoint has in shards/: here what wrote it (JSON)."""
ENGINE = "deepspeed"
"""The `engine` of the manifest's `fsdp` record of a checkpoint DeepSpeed wrote (DeepSpeedStrategy.checkpoint_record);
the shards of FSDP2 and tensor parallelism (torch.distributed.checkpoint's) have none."""
_RANK = re.compile(r"_pp_rank_(\d+)_")
"""How DeepSpeed names a process's partition files (zero_pp_rank_<r>_mp_rank_00_optim_states.pt)."""


def write(engine: Any, folder: Path, rank: int, record: dict[str, Any]) -> dict[str, int]:
    """Every process: the engine's checkpoint into `folder/shards`; returns the files this process wrote
    (`shards/<name>` -> bytes): its partitions, and on process 0 the rest (model states, index, script)."""
    root = folder / layout.SHARDS_DIR
    engine.save_checkpoint(str(folder), tag=TAG, save_latest=False)
    if rank == 0:
        (root / INDEX).write_text(json.dumps({**record, "tag": TAG}))
        if (folder / _RECOVERY).exists():
            (folder / _RECOVERY).replace(root / _RECOVERY)
    if dist.is_initialized():
        dist.barrier()
    written = {}
    for path in sorted(p for p in root.iterdir() if p.is_file()):
        found = _RANK.search(path.name)
        if (int(found.group(1)) if found else 0) == rank:
            written[f"{layout.SHARDS_DIR}/{path.name}"] = path.stat().st_size
    return written


def problems(manifest: Any, record: dict[str, Any], num_processes: int) -> list[str]:
    """Why this run cannot load a checkpoint's shards (written by another engine, stage or process count)."""
    saved = manifest.fsdp or {}
    if saved.get("engine") != ENGINE:
        return ["its shards are FSDP's (torch.distributed.checkpoint), which a run with deepspeed_plugin cannot load; "
                "load it with the fsdp_plugin it was saved with"]
    if saved.get("zero_stage") != record["zero_stage"] or manifest.num_processes != num_processes:
        return [f"it was saved by {manifest.num_processes} processes at ZeRO stage {saved.get('zero_stage')}, this run "
                f"has {num_processes} at stage {record['zero_stage']}: DeepSpeed's partitions load only into the same "
                "layout"]
    return []


def problems_without_engine(manifest: Manifest) -> list[str]:
    """Why a run without deepspeed_plugin cannot load a checkpoint's shards: they are DeepSpeed's ZeRO files, which
    only its engine reads ([] for shards of torch.distributed.checkpoint). The mirror of `problems`."""
    if (manifest.fsdp or {}).get("engine") == ENGINE:
        return ["it holds DeepSpeed's ZeRO checkpoint, which only a run with deepspeed_plugin loads"]
    return []


def load(engine: Any, folder: Path) -> None:
    """The engine's checkpoint from `folder/shards`: weights, optimizer state, scheduler and step counts."""
    path, _ = engine.load_checkpoint(str(folder), tag=TAG)
    if path is None:
        raise CheckpointError(f"DeepSpeed found no checkpoint in {str(folder / TAG)!r}.")


def full_weights(model: nn.Module, partitioned: bool) -> dict[str, torch.Tensor]:
    """The engine's model's weights: gathered under ZeRO 3 (every process must call it; process 0 gets them,
    the others an empty dict), else its own state_dict (copies on the CPU)."""
    engine = model
    if partitioned and hasattr(engine, "_zero3_consolidated_16bit_state_dict"):
        gathered = engine._zero3_consolidated_16bit_state_dict()  # type: ignore[operator]  # DeepSpeedEngine's
        return dict(gathered) if gathered is not None else {}
    inner = getattr(engine, "module", engine)
    return {name: tensor.detach().cpu().clone() for name, tensor in inner.state_dict().items()}


def load_full_weights(model: nn.Module, weights: dict[str, torch.Tensor], partitioned: bool) -> None:
    """Copy full weights into the engine's model; under ZeRO 3 each parameter is gathered, filled, re-partitioned."""
    inner: nn.Module = getattr(model, "module", model)
    if not partitioned or inner is model:
        inner.load_state_dict(weights, strict=False)
        return
    import deepspeed

    for name, parameter in inner.named_parameters():
        if name in weights:
            with deepspeed.zero.GatheredParameters([parameter], modifier_rank=0):
                if dist.get_rank() == 0:
                    parameter.data.copy_(weights[name])
