"""DeepSpeed's Ulysses (`ParallelismConfig(sp_size=N, sp_backend="deepspeed")` with a DeepSpeedPlugin), as Accelerate
runs it: DeepSpeed's own attention wrapper and groups, and its dataloader adapter.

`UlyssesSPAttentionHF.register_with_transformers` replaces the model's attention implementation in transformers'
registry by DeepSpeed's all-to-all wrapper and returns the groups (`mpu`) that `deepspeed.initialize` takes; each
prepared dataloader is wrapped in `UlyssesSPDataLoaderAdapter`, which gathers one batch from each of the sp
ranks and hands every rank its slice of each in turn (so a loader yields sp_size times as many batches, each
split over the group). As in Accelerate, the script computes the loss over the group itself (the batches carry
`shift_labels`; docs/long-context.md shows how), and the other processes are data parallel: ZeRO reduces over
the whole world, and `train_batch_size` counts each sequence once (divided by sp_size).
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from accel.parallel.context import refuse_windowed_layers


def register(model: nn.Module, parallelism: Any, micro_batch: int) -> Any:
    """Put DeepSpeed's Ulysses attention in transformers' registry for `model`; DeepSpeed's groups (the `mpu`).

    Args:
        model: The transformers model being prepared.
        parallelism: The ParallelismConfig (sp_size, its DeepSpeedSequenceParallelConfig).
        micro_batch: The engine's micro-batch size.
    """
    import deepspeed.comm
    import torch.distributed as dist
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from accel.kwargs_handlers.sequence_parallel import DeepSpeedSequenceParallelConfig

    sp = parallelism.sizes["sp"]
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError(f"ParallelismConfig(sp_size={sp}, sp_backend='deepspeed'): DeepSpeed's Ulysses wraps "
                         f"transformers' attention, and {type(model).__name__} has no config (not a transformers model).")
    refuse_windowed_layers(model, f"ParallelismConfig(sp_size={sp}, sp_backend='deepspeed')")
    handler = parallelism.sp_handler or DeepSpeedSequenceParallelConfig()
    # DeepSpeed's groups are made through its own comm layer, over accel's process group (deepspeed.initialize,
    # later, would do the same)
    deepspeed.comm.init_distributed(dist_backend=dist.get_backend(), dist_init_required=False)
    options: dict[str, Any] = {}
    if "disable_in_eval" in inspect.signature(UlyssesSPAttentionHF.register_with_transformers).parameters:
        options["disable_in_eval"] = True
    return UlyssesSPAttentionHF.register_with_transformers(
        model_name_or_path=model, sequence_parallel_size=sp, seq_length=handler.sp_seq_length,
        seq_length_is_variable=handler.sp_seq_length_is_variable, micro_batch_size=micro_batch,
        core_attn_implementation=handler.sp_attn_implementation or config._attn_implementation, **options,
    )


def adapt_loader(loader: Any, mpu: Any, device: Any) -> Any:
    """`loader` in DeepSpeed's `UlyssesSPDataLoaderAdapter` over the groups `mpu` describes.

    Args:
        loader: A prepared dataloader.
        mpu: What `register` returned.
        device: The Accelerator's device.
    """
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter

    return UlyssesSPDataLoaderAdapter(
        loader, sp_rank=mpu.get_sequence_parallel_rank(), sp_group=mpu.get_sequence_parallel_group(),
        sp_world_size=mpu.get_sequence_parallel_world_size(), device=device,
    )
