"""Launched with 2 processes by test_deepspeed_transformers.py: a tiny transformers Llama built under ZeRO 3's
zero3_init_flag (partitioned from the start), trained a few steps, then save_model gathers its weights."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from launching import report
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig

from accel import Accelerator
from accel.utils import DeepSpeedPlugin


def main(folder: Path) -> None:
    plugin = DeepSpeedPlugin(zero_stage=3, zero3_init_flag=True, zero3_save_16bit_model=True)
    accelerator = Accelerator(deepspeed_plugin=plugin)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)  # under zero.Init, as from_pretrained
    report("built_partitioned", all(p.numel() == 0 for p in model.parameters()))  # zero.Init: only shards
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.randint(0, 64, (16, 12), generator=torch.Generator().manual_seed(1))
    loader = torch.utils.data.DataLoader(tokens, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _ in range(3):
        for batch in loader:
            loss = model(input_ids=batch, labels=batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    report("losses", losses)
    weights = accelerator.get_state_dict(model)
    accelerator.save_model(model, folder)
    if accelerator.is_main_process:
        saved = load_file(str(folder / "model.safetensors"))
        full = dict(accelerator.unwrap_model(model).named_parameters())
        report("saved", {name: list(t.shape) for name, t in saved.items()})
        report("shapes", {name: list(p.ds_shape) for name, p in full.items()})
        report("same", all(torch.equal(saved[k], weights[k].contiguous()) for k in saved))  # bit for bit


if __name__ == "__main__":
    main(Path(sys.argv[1]))
