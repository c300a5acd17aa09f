"""Launched by test_qlora_fsdp.py: QLoRA (peft LoRA on bitsandbytes 4-bit bases) sharded by FSDP2.

    qlora_fsdp_script.py save FOLDER     train STEPS steps, saving the state after half of them
    qlora_fsdp_script.py resume FOLDER   build the model from another seed, load FOLDER, train the rest
    qlora_fsdp_script.py transformers FOLDER STORAGE   the Llama saved in FOLDER, quantized by transformers;
        trained STEPS steps, its state saved in FOLDER/state after half of them
    qlora_fsdp_script.py transformers_resume FOLDER STORAGE   another Llama (FOLDER) loads that state

Each rank reports its losses, what it holds of each kind of parameter, a checksum of its shards of the
quantized bases (before and after loading), and the dequantized bases get_state_dict gathers.
"""

from __future__ import annotations

import sys

import torch
from launching import report
from qlora_tiny import (
    STEPS,
    dequantized_sums,
    load_quantized_by_transformers,
    make_model,
    optimizer_for,
    quantization,
    train,
)
from torch.distributed.tensor import DTensor, Shard

from accel import Accelerator
from accel.utils import FullyShardedDataParallelPlugin

HALF = STEPS // 2


def build(seed: int) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer]:
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["LlamaDecoderLayer"]
    )
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin, kwarg_handlers=[quantization()])
    model = accelerator.prepare(make_model(seed))
    model.train()
    return accelerator, model, accelerator.prepare(optimizer_for(model))


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def bases(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in model.named_parameters() if "base_layer" in name and name.endswith(".weight")}


def report_layout(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """What this rank holds: per kind of parameter (quantized base, LoRA, other) and of optimizer state."""
    import bitsandbytes as bnb

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    base = bases(model)
    lora = {name: p for name, p in model.named_parameters() if "lora_" in name}
    report("num_4bit_layers", len(layers))
    report("base_frozen_uint8", all(not p.requires_grad and p.dtype == torch.uint8 for p in base.values()))
    report("base_sharded", all(isinstance(p, DTensor) and p.placements == (Shard(0),) for p in base.values()))
    report("base_numel", [sum(local(p).numel() for p in base.values()), sum(p.numel() for p in base.values())])
    report("quant_state_bytes", sum(t.numel() * t.element_size() for m in layers for t in _state_tensors(m)))
    report("lora_trains", all(p.requires_grad and p.dtype == torch.float32 for p in lora.values()))
    report("lora_sharded", all(isinstance(p, DTensor) and p.placements == (Shard(0),) for p in lora.values()))
    report("lora_numel", [sum(local(p).numel() for p in lora.values()), sum(p.numel() for p in lora.values())])
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor) and t.dim()]
    report("optimizer_numel", sum(local(t).numel() for t in state))
    report("trainable_is_lora", {n for n, p in model.named_parameters() if p.requires_grad} == set(lora))


def _state_tensors(layer: torch.nn.Module) -> list[torch.Tensor]:
    return [t for t in layer.quant_state.as_dict(packed=True).values() if isinstance(t, torch.Tensor)]


def checksum(model: torch.nn.Module) -> list[int]:
    """This rank's packed base bytes and their block scales, summed: equal checksums, equal bases."""
    import bitsandbytes as bnb

    packed = sum(int(local(p).to(torch.int64).sum()) for p in bases(model).values())
    scales = sum(float(m.quant_state.absmax.double().sum()) for m in model.modules() if isinstance(m, bnb.nn.Linear4bit))
    return [packed, round(scales, 6)]


def transformers_run(folder: str, storage: str, state: str | None) -> None:
    """QLoRA on a model transformers quantized (no BitsandbytesKwargs): sharded the same way. With `state`,
    that checkpoint is loaded first and the second half trained."""
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["LlamaDecoderLayer"]
    )
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
    model = accelerator.prepare(load_quantized_by_transformers(folder, getattr(torch, storage)))
    model.train()  # in eval mode bitsandbytes repacks CPU 4-bit weights in place
    base = bases(model)
    report("base_sharded", all(isinstance(p, DTensor) and p.placements == (Shard(0),) for p in base.values()))
    report("base_frozen", [len(base), all(not p.requires_grad and p.dtype == getattr(torch, storage) for p in base.values())])
    optimizer = accelerator.prepare(optimizer_for(model))
    if state is not None:
        accelerator.load_state(state)
        report("checksum", checksum(model))
        report("resumed_losses", train(accelerator, model, optimizer, range(HALF, STEPS)))
    else:
        losses = train(accelerator, model, optimizer, range(HALF))
        report("checksum", checksum(model))
        accelerator.save_state(f"{folder}/state")
        report("losses", losses + train(accelerator, model, optimizer, range(HALF, STEPS)))
    accelerator.end_training()


def main(mode: str, folder: str, storage: str = "", state: str | None = None) -> None:
    if mode.startswith("transformers"):
        transformers_run(folder, storage, state)
        return
    if mode == "save":
        accelerator, model, optimizer = build(seed=0)
        losses = train(accelerator, model, optimizer, range(HALF))
        report_layout(model, optimizer)
        report("checksum", checksum(model))
        accelerator.save_state(folder)
        report("losses", losses + train(accelerator, model, optimizer, range(HALF, STEPS)))
        report("dequantized", dequantized_sums(accelerator, model))
    else:
        accelerator, model, optimizer = build(seed=1)
        report("checksum_before_load", checksum(model))
        accelerator.load_state(folder)
        report("checksum", checksum(model))
        report("resumed_losses", train(accelerator, model, optimizer, range(HALF, STEPS)))
    accelerator.end_training()


if __name__ == "__main__":
    main(*sys.argv[1:5])
