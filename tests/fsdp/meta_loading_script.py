"""Launched on 2 processes by test_meta_loading.py: `python meta_loading_script.py MODE LLAMA_DIR`.

MODE 'normal': every process builds TinyNet and prepare shards it (the reference). MODE 'rank0':
cpu_ram_efficient_loading=True; TinyNet built in `init_module()` (real on process 0, on the meta
device elsewhere), then a model built with `init_module(empty_init=True)`, then a tiny Llama read
with `from_pretrained` inside `init_module()`. Each reports what its parameters were before prepare,
its local shards after, and losses.
"""

from __future__ import annotations

import sys

import torch
from fsdp_tiny import as_lists, batch, loss_of, make_model, optimizer_for
from launching import report
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from accel import Accelerator
from accel.utils import FullyShardedDataParallelPlugin

MODE, LLAMA_DIR = sys.argv[1], sys.argv[2]
plugin = FullyShardedDataParallelPlugin(
    auto_wrap_policy=lambda m: type(m).__name__ in {"Block", "LlamaDecoderLayer"},
    cpu_ram_efficient_loading=MODE == "rank0",
)
accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
rank, world = accelerator.process_index, accelerator.num_processes


def local_shards(model: torch.nn.Module) -> dict[str, list]:
    return as_lists({name: p.to_local() for name, p in model.named_parameters()})


def train(model: torch.nn.Module, label: str) -> None:
    optimizer = accelerator.prepare(optimizer_for(model))
    losses = []
    for step in range(3):
        x, y = batch(step, rank, world)
        loss = loss_of(model, x, y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    report(f"{label}_losses", losses)
    report(f"{label}_trained_shards", local_shards(model))


if MODE == "normal":
    model = accelerator.prepare(make_model())
    report("tiny_shards", local_shards(model))
    train(model, "tiny")
else:
    with accelerator.init_module():
        model = make_model()
    report("tiny_meta_before", [p.is_meta for p in model.parameters()])
    model = accelerator.prepare(model)
    report("tiny_shards", local_shards(model))
    train(model, "tiny")

    whole = accelerator.prepare(make_model(seed=rank))  # as an Accelerate script (built in full everywhere); process 1 differs
    report("whole_shards", local_shards(whole))

    with accelerator.init_module(empty_init=True):
        empty = make_model()
    report("empty_meta_before", all(p.is_meta for p in empty.parameters()))
    empty = accelerator.prepare(empty)
    report("empty_meta_after", any(p.is_meta or p.to_local().is_meta for p in empty.parameters()))
    full = make_model().state_dict() if rank == 0 else {}
    set_model_state_dict(empty, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    report("empty_loaded_shards", local_shards(empty))

    from transformers import LlamaForCausalLM

    with accelerator.init_module():
        llama = LlamaForCausalLM.from_pretrained(LLAMA_DIR)
    report("llama_meta_before", sorted({p.is_meta for p in llama.parameters()}))
    llama = accelerator.prepare(llama)
    report("llama_tied", llama.lm_head.weight is llama.model.embed_tokens.weight)
    full_weights = {name: p.full_tensor() for name, p in llama.named_parameters()}
    report("llama_full", as_lists(full_weights))
    report("llama_buffers", as_lists(dict(llama.named_buffers())))
    tokens = torch.arange(12).reshape(2, 6) % 100
    report("llama_loss", llama(input_ids=tokens, labels=tokens).loss.item())
accelerator.end_training()
