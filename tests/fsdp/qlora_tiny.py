"""A tiny QLoRA setup for the FSDP2 + bitsandbytes tests: a 2-layer Llama (hidden 64, from its config, no
download) with peft LoRA adapters, quantized to 4 bits (nf4-dq, float32 compute) by the Accelerator."""

from __future__ import annotations

from typing import Any

import torch

STEPS = 6
ROWS = 8
"""Training steps of every run, and sequences in the global batch (each of 2 processes takes half)."""
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_llama(seed: int = 0) -> Any:
    """The tiny Llama (hidden 64, 2 layers, vocabulary 128), built from its config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def make_model(seed: int = 0) -> Any:
    """The tiny Llama with LoRA adapters (r=4) on every Linear of its blocks; lm_head stays unquantized."""
    import peft

    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, lora_dropout=0.0)
    return peft.get_peft_model(make_llama(seed), lora)


def load_quantized_by_transformers(folder: str, storage: torch.dtype) -> Any:
    """The tiny Llama saved in `folder`, loaded 4-bit by transformers (BitsAndBytesConfig, nf4, float32
    compute, `storage` as bnb_4bit_quant_storage, lm_head kept), with the same LoRA adapters."""
    import peft
    from transformers import BitsAndBytesConfig, LlamaForCausalLM

    config = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32,
        bnb_4bit_quant_storage=storage, llm_int8_skip_modules=["lm_head"],
    )
    model = LlamaForCausalLM.from_pretrained(folder, quantization_config=config, dtype=torch.float32, device_map="cpu")
    torch.manual_seed(0)
    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, lora_dropout=0.0))


def quantization() -> Any:
    """The BitsandbytesKwargs of every run: 4-bit NF4 with double-quantized scales, float32 compute."""
    from accel import BitsandbytesKwargs

    return BitsandbytesKwargs(mode="nf4-dq", dtype=torch.float32, ignore_modules=["*lm_head"])


def batch(step: int) -> torch.Tensor:
    """The global batch of `step`: ROWS token sequences of 16."""
    return torch.randint(0, 128, (ROWS, 16), generator=torch.Generator().manual_seed(100 + step))


def train(accelerator: Any, model: Any, optimizer: Any, steps: range) -> list[float]:
    """Train on this process's rows of each step's batch; the loss of each step averaged over processes."""
    rank, size = accelerator.process_index, accelerator.num_processes
    losses = []
    for step in steps:
        ids = batch(step)[rank * ROWS // size:(rank + 1) * ROWS // size]
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    return losses


def optimizer_for(model: Any) -> torch.optim.Optimizer:
    """AdamW over what trains (the adapters)."""
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)


def dequantized_sums(accelerator: Any, model: Any) -> dict[str, float]:
    """`get_state_dict(model, dequantize=True)` summed per base weight (every process must call it; the
    main process gets the sums, the others an empty dict), with the dtype of every base weight checked."""
    state = accelerator.get_state_dict(model, dequantize=True)
    bases = {name: t for name, t in state.items() if name.endswith("base_layer.weight")}
    assert all(t.dtype == torch.float32 and t.dim() == 2 for t in bases.values()), {n: t.dtype for n, t in bases.items()}
    return {name: float(t.double().sum()) for name, t in bases.items()}
